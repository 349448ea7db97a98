"""Submissions that carry the files their manifest names: collected and rewritten on the client
(agile_arena.bundle), received, checked and unpacked by the server (agile_arena.server.uploads),
and LLM jobs (tiny SFT and GRPO) trained from them end to end."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest
import yaml

from agile_arena import ArenaClient, ArenaTrainer
from agile_arena.bundle import BundleError, collect, rewrite_text, write_upload
from agile_arena.errors import ArenaRequestError
from agile_arena.manifests import prepare_manifest
from agile_arena.server.auth import hash_key, new_key
from agile_arena.server.store import Store
from agile_core.trainer import TrainerConfigError

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- the client's bundle
def test_named_files_are_collected_and_rewritten_in_place_keeping_every_line(tmp_path):
    (tmp_path / "data" / "a").mkdir(parents=True)
    (tmp_path / "data" / "b").mkdir()
    (tmp_path / "data" / "a" / "train.jsonl").write_text("{}\n")
    (tmp_path / "data" / "b" / "train.jsonl").write_text("{}\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "my_env.py").write_text("def make():\n    pass\n")
    text = """\
# a comment that must stay
algorithm:
  name: GRPO   # trailing comment
environment:
  dataset: [data/a/train.jsonl, 'data/b/train.jsonl']
  reward_file_path: agile_llm.tiny        # a module name: imported there, not carried
  entrypoint: my_env.py:make
  wrappers: [gymnasium.wrappers:TimeLimit]
network:
  pretrained_model_name_or_path: &model model
"""
    data = yaml.safe_load(text)
    bundle = collect(data, tmp_path, search_cwd=False)
    by_field = {named.field: named.value for named in bundle.files}
    assert by_field == {
        ("environment", "dataset", 0): "inputs/train.jsonl",
        ("environment", "dataset", 1): "inputs/train_2.jsonl",
        ("environment", "entrypoint"): "inputs/my_env.py:make",
        ("network", "pretrained_model_name_or_path"): "inputs/model",
    }
    rewritten = rewrite_text(text, bundle)
    assert rewritten is not None
    assert rewritten.count("\n") == text.count("\n")
    assert "# a comment that must stay" in rewritten and "# trailing comment" in rewritten
    assert "&model" in rewritten
    assert yaml.safe_load(rewritten) == bundle.rewritten(data)
    assert yaml.safe_load(rewritten)["environment"]["reward_file_path"] == "agile_llm.tiny"
    assert sorted(name for _, name in bundle.members()) == [
        "inputs/model/config.json", "inputs/my_env.py", "inputs/train.jsonl", "inputs/train_2.jsonl"]


def test_a_manifest_naming_no_local_file_is_sent_as_written(tmp_path):
    manifest = tmp_path / "ppo.yaml"
    shutil.copy(REPO / "configs" / "training" / "ppo_cartpole.yaml", manifest)
    prepared = prepare_manifest(manifest)
    assert not prepared.bundle and prepared.text == manifest.read_text()


def test_folders_are_packed_through_links_and_a_looping_link_is_refused(tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "weights").write_bytes(b"w" * 10)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").symlink_to(blobs / "weights")
    (model / "__pycache__").mkdir()
    (model / "__pycache__" / "x.pyc").write_bytes(b"")
    bundle = collect({"network": {"pretrained_model_name_or_path": "model"}}, tmp_path)
    out = io.BytesIO()
    write_upload(out, {"manifest": "x"}, bundle)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {"submission.json", "inputs/model/model.safetensors"}
    assert members["inputs/model/model.safetensors"].isfile() and members["inputs/model/model.safetensors"].size == 10

    (model / "loop").symlink_to(model)
    with pytest.raises(BundleError, match="leads back"):
        collect({"network": {"pretrained_model_name_or_path": "model"}}, tmp_path).members()


def test_overrides_apply_before_the_files_are_collected(tmp_path):
    manifest = tmp_path / "ucb.yaml"
    shutil.copy(REPO / "configs" / "training" / "neural_ucb_iris.yaml", manifest)
    shutil.copytree(REPO / "configs" / "data", tmp_path.parent / "data", dirs_exist_ok=True)
    prepared = prepare_manifest(manifest, overrides=["training.pop_size=2"])
    sent = json.loads(prepared.text)
    assert sent["training"]["pop_size"] == 2
    assert sent["environment"]["features"] == "inputs/iris_features.csv"
    assert sorted(name for _, name in prepared.bundle.members()) == ["inputs/iris_features.csv",
                                                                       "inputs/iris_targets.csv"]


# ---------------------------------------------------------------- the server's side
def _archive(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info, payload in members:
            tar.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return out.getvalue()


def _file(name: str, payload: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    return info, payload


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.fixture
def server_app(tmp_path, monkeypatch):
    """An in-process server over `tmp_path/data` whose workers are stand-ins that exit at once."""
    from starlette.testclient import TestClient

    from agile_arena.server import procs
    from agile_arena.server.app import create_app

    def instant_worker(job_id: str, job_dir: Path, *args: object) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)

    monkeypatch.setattr(procs, "start_worker", instant_worker)
    data = tmp_path / "data"
    key = new_key()
    store = Store(data)
    store.add_key("t", hash_key(key))
    store.close()
    app = create_app(data, max_request_bytes=64 * 1024, max_upload_bytes=256 * 1024)
    with TestClient(app) as http:
        http.headers["Authorization"] = f"Bearer {key}"
        yield http, data


def _ucb_upload(tmp_path: Path) -> tuple[bytes, dict[str, object]]:
    """The Iris NeuralUCB manifest with its two tables, as the client packs it."""
    project = tmp_path / "project" / "training"
    project.mkdir(parents=True)
    shutil.copy(REPO / "configs" / "training" / "neural_ucb_iris.yaml", project)
    shutil.copytree(REPO / "configs" / "data", project.parent / "data")
    prepared = prepare_manifest(project / "neural_ucb_iris.yaml")
    fields = {"manifest": prepared.text, "filename": prepared.filename}
    out = io.BytesIO()
    write_upload(out, fields, prepared.bundle)
    return out.getvalue(), fields


def test_an_upload_is_unpacked_into_the_job_folder_and_validated_against_it(server_app, tmp_path):
    http, data = server_app
    body, fields = _ucb_upload(tmp_path)
    response = http.post("/v1/experiments", content=body, headers={"Content-Type": "application/x-tar"})
    assert response.status_code == 201, response.text
    job = data / "jobs" / response.json()["id"]
    assert sorted(p.name for p in (job / "inputs").iterdir()) == ["iris_features.csv", "iris_targets.csv"]
    assert (job / "inputs" / "iris_features.csv").read_bytes() == (REPO / "configs/data/iris_features.csv").read_bytes()
    assert (job / "manifest.yaml").read_text() == fields["manifest"]
    assert [p.name for p in (data / "jobs").iterdir()] == [job.name]  # no staging folder left

    # the same manifest without its files: the tables are looked for in the job folder only
    refused = http.post("/v1/experiments", json=fields)
    assert refused.status_code == 422
    assert {e["path"] for e in refused.json()["errors"]} == {"environment.features", "environment.targets"}
    assert "the job folder" in refused.json()["errors"][0]["message"]
    assert str(data) not in refused.text


SUBMISSION = json.dumps({"manifest": "algorithm: {name: PPO}\nenvironment: {name: CartPole-v1}\n"}).encode()


@pytest.mark.parametrize(("members", "message"), [
    ([_file("submission.json", SUBMISSION), _link("inputs/passwd", "/etc/passwd")], "links are not allowed"),
    ([_file("submission.json", SUBMISSION), _link("inputs/hard", "submission.json", tarfile.LNKTYPE)],
     "links are not allowed"),
    ([_file("submission.json", SUBMISSION), _file("inputs/../../escape.py", b"x")], "leaves the target folder"),
    ([_file("submission.json", SUBMISSION), _file("/abs.py", b"x")], "absolute path"),
    ([_file("submission.json", SUBMISSION), _file("elsewhere.py", b"x")], "files go under inputs/"),
    ([_file("submission.json", SUBMISSION), _file("inputs/a", b"1"), _file("inputs/a", b"2")], "appears twice"),
    ([_file("inputs/a", b"1")], "has no submission.json"),
])
def test_unsafe_or_incomplete_uploads_are_refused_and_leave_nothing(server_app, members, message):
    http, data = server_app
    response = http.post("/v1/experiments", content=_archive(members), headers={"Content-Type": "application/x-tar"})
    assert response.status_code == 400 and message in response.json()["message"], response.text
    assert not any((data / "jobs").iterdir()) if (data / "jobs").exists() else True


def test_a_body_that_is_not_a_tar_and_an_upload_over_the_limit_are_refused(server_app):
    http, data = server_app
    garbage = http.post("/v1/experiments", content=b"not a tar" * 100, headers={"Content-Type": "application/x-tar"})
    assert garbage.status_code == 400 and "not a readable tar archive" in garbage.json()["message"]
    big = _archive([_file("submission.json", SUBMISSION), _file("inputs/big.bin", b"\0" * 300 * 1024)])
    refused = http.post("/v1/experiments", content=big, headers={"Content-Type": "application/x-tar"})
    assert refused.status_code == 413 and "upload" in refused.json()["message"]
    # a JSON body keeps the smaller request limit
    too_long = http.post("/v1/experiments", json={"manifest": "x" * 100_000})
    assert too_long.status_code == 413 and "request body" in too_long.json()["message"]
    assert http.get("/v1/health").json()["max_upload_bytes"] == 256 * 1024
    assert not any((data / "jobs").iterdir()) if (data / "jobs").exists() else True


def test_the_client_refuses_files_over_the_servers_limit_before_sending(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "big.csv").write_bytes(b"1\n" * 200_000)
    (project / "y.csv").write_bytes(b"1\n")
    manifest = project / "ucb.yaml"
    manifest.write_text((REPO / "configs/training/neural_ucb_iris.yaml").read_text()
                        .replace("../data/iris_features.csv", "big.csv").replace("../data/iris_targets.csv", "y.csv"))
    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        return httpx.Response(200, json={"status": "ok", "max_upload_bytes": 100_000})

    client = ArenaClient(api_key="arena_" + "x" * 40, url="http://127.0.0.1:1", transport=httpx.MockTransport(server))
    with pytest.raises(ArenaRequestError, match="more than this server's upload limit"):
        client.submit(manifest)
    assert seen == ["GET /v1/health"]


# ---------------------------------------------------------------- LLM jobs end to end
@pytest.fixture(scope="module")
def llm_project(tmp_path_factory) -> Path:
    """A folder with the tiny model and data and the SFT and GRPO example manifests, shortened."""
    from agile_llm.tiny import write_tiny

    project = tmp_path_factory.mktemp("llm-project")
    write_tiny(project / "tiny")
    for name, budget in (("sft_tiny", ("max_steps: 300", "max_steps: 20")), ("grpo_tiny", ("max_steps: 100", "max_steps: 8"))):
        text = (REPO / "configs" / "training" / f"{name}.yaml").read_text()
        text = text.replace("../llm/tiny/", "tiny/").replace(*budget)
        text = text.replace("evo_steps: 50", "evo_steps: 10").replace("evo_steps: 25", "evo_steps: 4")
        (project / f"{name}.yaml").write_text(text)
    (project / "my_reward.py").write_text(
        "def first_digit(completion, answer, prompt):\n"
        "    return 1.0 if completion.strip()[:1] == answer.strip()[:1] else 0.0\n")
    return project


def _evaluate(checkpoint: Path, manifest: Path) -> dict[str, float]:
    result = subprocess.run([sys.executable, "-m", "agile_cli.main", "evaluate", str(checkpoint), "--manifest",
                             str(manifest), "--json"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_an_sft_job_carries_its_model_and_data_and_its_elite_comes_back(arena_server, llm_project, tmp_path):
    manifest = llm_project / "sft_tiny.yaml"
    with ArenaClient(api_key=arena_server.key, url=arena_server.url) as client:
        submitted = client.submit(manifest, experiment_name="sft")
        finished = client.wait(submitted["id"])
        log = "".join(e.line for e in client.logs(submitted["id"]) if hasattr(e, "line"))
        assert finished["status"] == "completed", log
        elite = client.download(submitted["id"], "elite", tmp_path)
    job = Path(arena_server.data_dir) / "jobs" / submitted["id"]
    assert (job / "inputs" / "model" / "model.safetensors").is_file() and (job / "inputs" / "sft.jsonl").is_file()
    result = _evaluate(elite, manifest)
    assert math.isfinite(result["fitness"]) and result["fitness"] < 0  # minus the test loss


def test_a_grpo_job_with_an_uploaded_reward_module_trains_and_its_elite_comes_back(arena_server, llm_project, tmp_path):
    with ArenaClient(api_key=arena_server.key, url=arena_server.url) as client:
        trainer = ArenaTrainer.from_manifest(llm_project / "grpo_tiny.yaml", client=client)
        trainer.manifest.environment.reward_fn_name = "first_digit"
        with pytest.raises(TrainerConfigError, match="returned None"):
            ArenaTrainer.from_manifest(llm_project / "grpo_tiny.yaml", client=client).train(
                reward_file=b"def digit_reward(completion, answer, prompt):\n    return None\n", completion="2")
        submitted = trainer.train(reward_file=llm_project / "my_reward.py", completion="0 0", experiment_name="grpo")
        assert submitted["reward_check"]["reward"] == 1.0  # the first row's answer starts with 0
        finished = client.wait(submitted["id"])
        assert finished["status"] == "completed", finished
        elite = client.download(submitted["id"], "elite", tmp_path)
    job = Path(arena_server.data_dir) / "jobs" / submitted["id"]
    sent = yaml.safe_load((job / "manifest.yaml").read_text())
    assert sent["environment"]["reward_file_path"] == "inputs/my_reward.py"
    assert (job / "inputs" / "my_reward.py").read_text() == (llm_project / "my_reward.py").read_text()
    result = _evaluate(elite, llm_project / "grpo_tiny.yaml")
    assert 0.0 <= result["fitness"] <= 1.0
