"""Arena server parts without a server process: path confinement, keys, the worker environment, the
log event stream, tar downloads, the store and crash recovery, log scrubbing, the body limit."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import tarfile
from pathlib import Path

import pytest

from agile_arena.server import create_key
from agile_arena.server.auth import KEY_PATTERN, bearer_token, hash_key, new_key
from agile_arena.server.files import tar_directory
from agile_arena.server.logs import stream_log
from agile_arena.server.paths import UnsafePath, manifest_path_issues, resolve_inside
from agile_arena.server.procs import worker_env
from agile_arena.server.runner import Runner, has_checkpoint
from agile_arena.server.store import Store
from tests.arena.conftest import tiny_ppo_manifest


def test_resolve_inside_refuses_everything_that_leaves_the_folder(tmp_path):
    root = tmp_path / "run"
    (root / "checkpoints" / "c1").mkdir(parents=True)
    (root / "out").symlink_to(tmp_path, target_is_directory=True)
    (root / "inner").symlink_to(root / "checkpoints", target_is_directory=True)
    assert resolve_inside(root, "checkpoints/c1") == (root / "checkpoints" / "c1").resolve()
    assert resolve_inside(root, "") == root.resolve() == resolve_inside(root, ".")
    assert resolve_inside(root, "inner/c1") == (root / "checkpoints" / "c1").resolve()  # a link that stays inside
    for bad in ["..", "../x", "checkpoints/../../x", "/etc/passwd", "~/.ssh", "C:\\Windows", "\\\\host\\share",
                "out", "out/other", "a\x00b", "checkpoints\\..\\..\\x"]:
        with pytest.raises(UnsafePath):
            resolve_inside(root, bad)


def test_manifest_path_issues_finds_path_fields_at_any_depth(tmp_path):
    data = {"environment": {"name": "X", "path": "../env.py", "wrappers": [{"kwargs": {"log_dir": "/var/log"}}]},
            "training": {"checkpoint_path": "ckpt", "seed": 1},
            "network": {"pretrained_model_name_or_path": "org/model"}}
    issues = manifest_path_issues(data, tmp_path)
    assert sorted(path for path, _, _ in issues) == [("environment", "path"),
                                                    ("environment", "wrappers", 0, "kwargs", "log_dir")]
    assert manifest_path_issues({"network": {"pretrained_model_name_or_path": "/models/x"}}, tmp_path)


def test_manifests_may_not_name_standard_library_callables(tmp_path):
    from agile_arena.server.validation import InvalidManifest, validate_manifest_text

    manifest = tiny_ppo_manifest()
    refused = {
        "environment.entrypoint": "  entrypoint: subprocess:run\n  config: {args: [id]}",
        "environment.wrappers[0]": "  wrappers: [builtins.exec]",
        "environment.wrappers[1].name": "  wrappers: [gymnasium.wrappers.RecordEpisodeStatistics, {name: 'os:system'}]",
    }
    for field, lines in refused.items():
        with pytest.raises(InvalidManifest) as caught:
            validate_manifest_text(manifest.replace("  num_envs: 2", f"  num_envs: 2\n{lines}"), "m.yaml", tmp_path)
        assert field in [error["path"] for error in caught.value.errors], (field, caught.value.errors)
    wrapped = manifest.replace("  num_envs: 2", "  num_envs: 2\n  wrappers: [gymnasium.wrappers.RecordEpisodeStatistics]")
    assert validate_manifest_text(wrapped, "m.yaml", tmp_path).environment == "CartPole-v1"


def test_keys_bearer_parsing_and_hash_only_storage(tmp_path):
    key = new_key()
    assert KEY_PATTERN.fullmatch(key) and key != new_key()
    assert bearer_token(f"Bearer {key}") == key == bearer_token(f"bearer  {key} ")
    for header in [None, "", key, f"Basic {key}", f"Bearer {key}x", "Bearer arena_short", f"Token {key}"]:
        assert bearer_token(header) is None, header
    stored = create_key(tmp_path, "alice")
    db = Store(tmp_path)
    assert db.key_id_for_hash(hash_key(stored)) is not None and db.key_id_for_hash(hash_key(key)) is None
    db.close()
    assert stored.encode() not in (tmp_path / "arena.sqlite3").read_bytes()
    with pytest.raises(ValueError):
        create_key(tmp_path, "  ")


def test_worker_environment_is_an_allow_list(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-key")
    monkeypatch.setenv("ARENA_KEY", new_key())
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = worker_env("0123456789abcdef")
    assert not {"AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "ARENA_KEY"} & set(env)
    assert env["OMP_NUM_THREADS"] == "1" and env["LC_ALL"] == "C.UTF-8" and env["PATH"]
    assert env["AGILE_ARENA_JOB"] == "0123456789abcdef" and env["PYTHONUNBUFFERED"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert worker_env("x")["OMP_NUM_THREADS"] == "4"


def _collect(path: Path, offset: int, follow: bool, statuses: list[str]) -> list[dict]:
    async def run() -> list[dict]:
        seen = iter(statuses)
        last = [statuses[0]]

        def status() -> str:
            last[0] = next(seen, last[0])
            return last[0]

        return [json.loads(chunk) async for chunk in stream_log(path, offset, follow, status, lambda: False)]

    return asyncio.run(run())


def test_log_stream_offsets_partial_lines_and_follow(tmp_path):
    log = tmp_path / "log.txt"
    log.write_bytes("one\ntwo ü\nthr".encode())
    running = _collect(log, 0, False, ["running"])
    assert running == [{"type": "status", "status": "running"}, {"type": "log", "offset": 4, "line": "one"},
                       {"type": "log", "offset": 11, "line": "two ü"}]  # offsets in bytes; "thr" not finished
    assert _collect(log, 4, False, ["running"])[1:] == running[2:]
    done = _collect(log, 11, False, ["completed"])
    assert done[1:] == [{"type": "log", "offset": 14, "line": "thr"}]  # a finished job: the last partial line
    followed = _collect(log, 0, True, ["running", "running", "failed"])
    assert [e.get("status") for e in followed if e["type"] == "status"] == ["running", "failed"]
    assert followed[-1] == {"type": "log", "offset": 14, "line": "thr"}


def test_tar_download_has_relative_names_and_skips_links(tmp_path):
    folder = tmp_path / "ckpt"
    (folder / "sub").mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    (folder / "sub" / "part.bin").write_bytes(b"\x00" * 100)
    (folder / "escape").symlink_to(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(tar_directory(folder).read())) as tar:
        assert sorted(tar.getnames()) == ["manifest.json", "sub", "sub/part.bin"]
        part = tar.extractfile("sub/part.bin")
        assert part is not None and part.read() == b"\x00" * 100


def test_recovery_marks_running_jobs_interrupted_and_keeps_finished_ones(tmp_path):
    store = Store(tmp_path)
    key_id = store.add_key("k", hash_key(new_key()))
    for job_id, status in [("a" * 16, "running"), ("b" * 16, "completed"), ("c" * 16, "running"),
                           ("d" * 16, "queued")]:
        (tmp_path / "jobs" / job_id).mkdir(parents=True)
        store.add_job(job_id, key_id, None, None, "local", "PPO", "CartPole-v1")
        if status != "queued":
            store.mark_running(job_id, 999_999_999)
        if status == "completed":
            store.mark_finished(job_id, "completed", 0, None)
    checkpoint = tmp_path / "jobs" / ("c" * 16) / "run" / "checkpoints" / "checkpoint_000000512"
    checkpoint.mkdir(parents=True)
    (checkpoint / "manifest.json").write_text("{}")
    assert has_checkpoint(checkpoint.parents[1])
    Runner(store, tmp_path, slots=1).recover()
    jobs = {job_id: store.get(job_id) for job_id in ("a" * 16, "b" * 16, "c" * 16, "d" * 16)}
    assert {k: v.status for k, v in jobs.items() if v} == {"a" * 16: "interrupted", "b" * 16: "completed",
                                                         "c" * 16: "interrupted", "d" * 16: "queued"}
    assert "no checkpoint" in (jobs["a" * 16].error or "") and f"agile arena resume {'c' * 16}" in (jobs["c" * 16].error or "")
    runner = Runner(store, tmp_path, slots=1)
    runner.resume("c" * 16)
    assert store.get("c" * 16).status == "queued" and store.get("c" * 16).resume  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="no checkpoint"):
        runner.resume("a" * 16)
    with pytest.raises(ValueError, match="completed"):
        runner.resume("b" * 16)
    store.close()


def test_log_records_are_scrubbed_of_keys():
    from agile_arena.server.serving import ScrubKeys

    key = new_key()
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", f"/v1/experiments?key={key}", "1.1", 200), None)
    ScrubKeys().filter(record)
    assert key not in record.getMessage() and "arena_***" in record.getMessage()


def test_a_chunked_body_over_the_limit_is_refused(tmp_path):
    from starlette.testclient import TestClient

    from agile_arena.server.app import create_app

    key = create_key(tmp_path, "t")
    app = create_app(tmp_path, max_request_bytes=4096)
    with TestClient(app) as http:
        headers = {"Authorization": f"Bearer {key}"}
        chunks = iter([b'{"manifest": "', b"x" * 3000, b"y" * 3000, b'"}'])
        response = http.post("/v1/experiments", content=chunks, headers=headers)
        assert response.status_code == 413 and response.json()["error"] == "too_large"
        small = http.post("/v1/experiments", json={"manifest": tiny_ppo_manifest().replace("PPO", "PPX")},
                          headers=headers)
        assert small.status_code == 422 and small.json()["errors"][0]["path"] == "algorithm.name"
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())


def test_stop_escalates_to_sigkill_after_the_grace_period_and_slots_are_respected(tmp_path, monkeypatch):
    """Workers that ignore SIGTERM (stand-ins for the real one) are killed after `stop_grace`; with one
    slot the second job waits; a queued job stops at once."""
    import subprocess
    import sys
    import time

    from agile_arena.server import procs

    def stubborn_worker(job_id: str, job_dir: Path, resume: bool, device: str, *args: object) -> subprocess.Popen[bytes]:
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(120)"
        with open(job_dir / "log.txt", "ab") as log:
            return subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=procs.worker_env(job_id))

    monkeypatch.setattr(procs, "start_worker", stubborn_worker)
    store = Store(tmp_path)
    key_id = store.add_key("k", hash_key(new_key()))
    ids = ["1" * 16, "2" * 16, "3" * 16]
    for job_id in ids:
        (tmp_path / "jobs" / job_id).mkdir(parents=True)
        store.add_job(job_id, key_id, None, None, "local", "PPO", "CartPole-v1")

    async def up(job_id: str) -> None:  # running, and ignoring SIGTERM by now
        log = tmp_path / "jobs" / job_id / "log.txt"
        while not (log.exists() and b"up" in log.read_bytes()):
            await asyncio.sleep(0.05)

    async def scenario() -> float:
        runner = Runner(store, tmp_path, slots=1, stop_grace=1.0)
        await runner.start()
        await up(ids[0])
        assert [store.get(i).status for i in ids] == ["running", "queued", "queued"]  # type: ignore[union-attr]
        await runner.stop(ids[2])  # queued: stopped at once, never started
        started = time.monotonic()
        await runner.stop(ids[0])  # ignores SIGTERM: SIGKILL after the grace period
        took = time.monotonic() - started
        await up(ids[1])
        await runner.shutdown()  # the second one is killed too, and marked interrupted
        return took

    took = asyncio.run(scenario())
    first, second, third = (store.get(i) for i in ids)
    assert first is not None and second is not None and third is not None
    assert (first.status, first.exit_code) == ("stopped", -9) and 0.9 <= took < 10
    assert third.status == "stopped" and third.started_at is None and third.exit_code is None
    assert second.status == "interrupted" and second.exit_code == -9
    assert procs.orphans_of(ids[0]) == [] and procs.orphans_of(ids[1]) == []
    store.close()
