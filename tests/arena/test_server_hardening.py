"""Arena server hardening: manifests naming host files are refused alike whatever exists there,
errors never show the server's folders, MF-PBT is refused at submission, names are made safe to
display, and no request, however malformed, gets a 500 (a bounded fuzz over every endpoint)."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.arena.conftest import ArenaServer, launch_arena_server, tiny_ppo_manifest

SFT = """\
algorithm: {name: SFT, batch_size: 2}
environment: {dataset: DATASET}
network: {pretrained_model_name_or_path: MODEL}
training: {max_steps: 10, pop_size: 1}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArenaServer]:
    started = launch_arena_server(tmp_path_factory.mktemp("hardening"))
    try:
        yield started
    finally:
        started.stop(timeout=60)
        started.kill()


@pytest.fixture(scope="module")
def http(server: ArenaServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}, timeout=60) as client:
        yield client


def submit(http: httpx.Client, manifest: str, **fields: object) -> httpx.Response:
    return http.post("/v1/experiments", json={"manifest": manifest, "filename": "exp.yaml", **fields})


def refused_fields(response: httpx.Response) -> list[str]:
    assert response.status_code == 422, response.text
    return [error["path"] for error in response.json()["errors"]]


def test_files_outside_the_job_folder_are_refused_whatever_exists_there(server: ArenaServer, http: httpx.Client,
                                                                      tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_text('{"prompt": "a", "response": "b"}\n')
    cases = {
        "environment.dataset": SFT.replace("DATASET", str(real)).replace("MODEL", "tiny"),
        "environment.dataset[1]": SFT.replace("DATASET", f"[ok.jsonl, {real}]").replace("MODEL", "tiny"),
        "network.pretrained_model_name_or_path": SFT.replace("DATASET", "ok.jsonl").replace("MODEL", str(tmp_path)),
        "environment.entrypoint": tiny_ppo_manifest().replace("  num_envs: 2", "  num_envs: 2\n  entrypoint: ../x.py:Env"),
        "environment.name": tiny_ppo_manifest().replace("name: CartPole-v1", "name: '/tmp/env.py:CartPole-v1'"),
        "environment.wrappers[0]": tiny_ppo_manifest().replace("  num_envs: 2", "  num_envs: 2\n  wrappers: [~/w.py:W]"),
    }
    for field, manifest in cases.items():
        assert field in refused_fields(submit(http, manifest)), field
    # an existing and a missing host file get the same answer: nothing is looked up
    answers = []
    for target in (real, tmp_path / "missing.jsonl"):
        body = submit(http, SFT.replace("DATASET", str(target)).replace("MODEL", "tiny")).json()
        answers.append([(error["path"], error["message"]) for error in body["errors"]])
    assert answers[0] == answers[1]


def test_errors_never_show_the_servers_folders(server: ArenaServer, http: httpx.Client) -> None:
    missing = tiny_ppo_manifest().replace("  num_envs: 2", "  num_envs: 2\n  path: not_uploaded.py")
    response = submit(http, missing)
    assert "environment.path" in refused_fields(response)
    text = response.text
    assert str(server.data_dir) not in text and str(server.data_dir.resolve()) not in text, text
    assert "the job folder" in text, text


def test_mf_pbt_is_refused_at_submission(http: httpx.Client) -> None:
    manifest = tiny_ppo_manifest().replace("pop_size: 2", "pop_size: 6") + "selection_strategy: {strategy: multi_frequency}\n"
    response = submit(http, manifest)
    assert "selection_strategy.strategy" in refused_fields(response)
    assert "tournament selection only" in response.text


def test_malformed_requests_get_a_4xx_with_a_json_error(http: httpx.Client) -> None:
    deep = ("[" * 100_000).encode()
    job = submit(http, tiny_ppo_manifest(max_steps=512)).json()["id"]
    http.post(f"/v1/experiments/{job}/stop")
    cases = [
        http.post("/v1/experiments", content=b'{"manifest": ' + deep + b"}"),
        http.post("/v1/experiments", content=b'{"manifest": "x", "project": "\\ud800"}'),
        http.post("/v1/experiments", content=b'{"manifest": "a: \\udfff", "filename": "m.yaml"}'),
        http.get(f"/v1/experiments/{job}/download", params={"path": "a" * 60_000}),
        http.get(f"/v1/experiments/{job}/download", params={"path": "a" * 300}),
        http.get(f"/v1/experiments/{job}/download", params={"path": "/".join(["b" * 250] * 15)}),
        http.get(f"/v1/experiments/{job}/logs", params={"offset": "\u0663"}),
        http.get(f"/v1/experiments/{job}/logs", params={"offset": "9" * 5000}),
    ]
    for response in cases:
        assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
        assert "error" in response.json()


def test_names_are_made_safe_to_display(http: httpx.Client) -> None:
    name = "evil\x1b[2J\r\nname\u202e"
    created = submit(http, tiny_ppo_manifest(max_steps=512), experiment_name=name, project="p\x07")
    assert created.status_code == 201, created.text
    shown = http.get(f"/v1/experiments/{created.json()['id']}").json()
    assert shown["name"] == "evil\ufffd[2J\ufffd\ufffdname\ufffd" and shown["project"] == "p\ufffd"
    http.post(f"/v1/experiments/{created.json()['id']}/stop")


JOB_IDS = st.one_of(st.just("0123456789abcdef"), st.text(string.hexdigits, min_size=0, max_size=20),
                    st.text(max_size=30))
PARAMS = st.dictionaries(st.sampled_from(["offset", "follow", "path", "x"]),
                         st.one_of(st.text(max_size=40), st.integers().map(str), st.just("9" * 30)), max_size=3)
BODIES = st.one_of(
    st.binary(max_size=300),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30)),
                 lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner,
                                                                                    max_size=4)),
                 max_leaves=20).map(lambda value: json.dumps(value).encode()),
    st.fixed_dictionaries({"manifest": st.text(max_size=200)},
                          optional={"filename": st.text(max_size=40), "project": st.text(max_size=40),
                                    "experiment_name": st.text(max_size=40),
                                    "resource_id": st.one_of(st.none(), st.text(max_size=10))})
    .map(lambda value: json.dumps(value).encode()),
)
ROUTES = ["", "/logs", "/stop", "/resume", "/checkpoints", "/metrics", "/download", "/x"]


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]), job=JOB_IDS, route=st.sampled_from(ROUTES),
       params=PARAMS, body=BODIES,
       top=st.sampled_from([None, "/v1/experiments", "/v1/health", "/v1/resources", "/v1", "/", "/v2/experiments"]))
def test_no_request_gets_a_500(http: httpx.Client, method: str, job: str, route: str, params: dict[str, str],
                               body: bytes, top: str | None) -> None:
    path = top if top is not None else f"/v1/experiments/{job}{route}"
    try:
        response = http.request(method, path, params=params, content=body if method != "GET" else None)
    except httpx.InvalidURL:
        return  # the client refuses to send it: nothing reaches the server
    assert response.status_code < 500, (method, path, params, body[:200], response.status_code, response.text[:300])
    if response.status_code >= 400 and route != "/logs":
        assert "error" in response.json(), response.text[:300]
    if response.status_code == 201:  # a valid manifest slipped through: do not leave it training
        http.post(f"/v1/experiments/{response.json()['id']}/stop")
