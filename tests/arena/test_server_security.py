"""Arena server security: keys, per-key isolation, path confinement, size and validation limits,
and no key in any log or file (a real server subprocess)."""

from __future__ import annotations

import io
import os
import sqlite3
import tarfile
from pathlib import Path

import httpx
import pytest

from tests.arena.conftest import ArenaServer, tiny_ppo_manifest, wait_for

TIMEOUT = httpx.Timeout(120.0)


def client(server: ArenaServer, key: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=TIMEOUT)


def job_dirs(server: ArenaServer) -> list[str]:
    jobs = server.data_dir / "jobs"
    return sorted(os.listdir(jobs)) if jobs.exists() else []


def job_rows(server: ArenaServer) -> int:
    with sqlite3.connect(server.data_dir / "arena.sqlite3") as db:
        return int(db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])


def test_every_route_but_health_needs_a_valid_key(arena_server):
    some_id = "0123456789abcdef"
    routes = [("GET", "/v1/resources"), ("GET", "/v1/experiments"), ("POST", "/v1/experiments"),
              ("GET", f"/v1/experiments/{some_id}"), ("GET", f"/v1/experiments/{some_id}/logs"),
              ("POST", f"/v1/experiments/{some_id}/stop"), ("POST", f"/v1/experiments/{some_id}/resume"),
              ("GET", f"/v1/experiments/{some_id}/checkpoints"), ("GET", f"/v1/experiments/{some_id}/metrics"),
              ("GET", f"/v1/experiments/{some_id}/download?path=elite")]
    wrong = "arena_" + "A" * 43
    headers = [{}, {"Authorization": f"Bearer {wrong}"}, {"Authorization": "Bearer"},
               {"Authorization": f"Basic {arena_server.key}"}, {"Authorization": f"Bearer {arena_server.key}x"}]
    with httpx.Client(base_url=arena_server.url, timeout=TIMEOUT) as http:
        health = http.get("/v1/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        for method, path in routes:
            for header in headers:
                body = {"manifest": tiny_ppo_manifest()} if method == "POST" else None
                response = http.request(method, path, headers=header, json=body)
                assert response.status_code == 401, (method, path, header, response.text)
                assert response.json()["error"] == "unauthorized"
        ok = http.get("/v1/resources", headers={"Authorization": f"Bearer {arena_server.key}"})
        assert ok.status_code == 200
        assert ok.json() == [{"id": "local", "slots": 1, "running": 0, "queued": 0}]
    assert job_rows(arena_server) == 0 and job_dirs(arena_server) == []


def test_oversized_and_invalid_manifests_are_refused_before_anything_runs(arena_server):
    manifest = tiny_ppo_manifest()
    with client(arena_server, arena_server.key) as http:
        huge = http.post("/v1/experiments", json={"manifest": manifest + "#" * 1_200_000})
        assert huge.status_code == 413 and huge.json()["error"] == "too_large"
        cases = {
            "algorithm.lr": manifest.replace("lr: 1.0e-3", "lr: -0.5"),
            "algorithm.name": manifest.replace("name: PPO", "name: NoSuchAlgorithm"),
            "training.checkpoint_path": manifest.replace("  seed: 0", "  seed: 0\n  checkpoint_path: ../../elsewhere"),
            "environment.path": manifest.replace("  num_envs: 2", "  num_envs: 2\n  path: /etc/passwd"),
            "environment.entrypoint": manifest.replace("  num_envs: 2", "  num_envs: 2\n  entrypoint: os:system\n"
                                                                         "  config: {command: touch pwned}"),
        }
        for field, text in cases.items():
            response = http.post("/v1/experiments", json={"manifest": text, "filename": "exp.yaml"})
            assert response.status_code == 422, (field, response.text)
            body = response.json()
            assert body["error"] == "validation"
            assert field in [error["path"] for error in body["errors"]], (field, body)
        bad_fields = http.post("/v1/experiments", json={"manifest": manifest, "resource_id": "gpu-farm"})
        assert bad_fields.status_code == 400 and bad_fields.json()["error"] == "bad_request"
        not_json = http.post("/v1/experiments", content=b"algorithm: PPO")
        assert not_json.status_code == 400
        assert http.get("/v1/experiments").json() == []
    # documented choice: a refused submission leaves no job row and no job folder at all
    assert job_rows(arena_server) == 0 and job_dirs(arena_server) == []


def test_keys_are_isolated_downloads_are_confined_and_keys_never_stored(arena_server):
    owner = client(arena_server, arena_server.key)
    other_key = arena_server.create_key("someone else")
    other = client(arena_server, other_key)
    created = owner.post("/v1/experiments", json={"manifest": tiny_ppo_manifest(), "experiment_name": "mine",
                                                  "project": "security"})
    assert created.status_code == 201, created.text
    job = created.json()
    assert (job["status"], job["name"], job["project"], job["algorithm"], job["environment"]) == \
        ("queued", "mine", "security", "PPO", "CartPole-v1")
    job_id = job["id"]

    # another key: the job does not exist for it (404), whatever it tries, and nothing changes
    assert other.get("/v1/experiments").json() == []
    attempts = [("GET", ""), ("GET", "/logs"), ("POST", "/stop"), ("POST", "/resume"), ("GET", "/checkpoints"),
                ("GET", "/metrics"), ("GET", "/download?path=elite")]
    for method, suffix in attempts:
        response = other.request(method, f"/v1/experiments/{job_id}{suffix}")
        assert response.status_code == 404, (suffix, response.text)
        assert response.json()["error"] == "not_found"

    done = wait_for(lambda: (j := owner.get(f"/v1/experiments/{job_id}").json())["status"] not in
                    ("queued", "running") and j, 300, "the job to finish")
    assert done["status"] == "completed" and done["exit_code"] == 0, done
    run_dir = arena_server.data_dir / "jobs" / job_id / "run"
    assert (run_dir / "summary.json").is_file() and (run_dir / "manifest.resolved.json").is_file()

    # downloads: inside the run directory only
    outside_dir = arena_server.data_dir.parent
    (run_dir / "link_out").symlink_to(outside_dir, target_is_directory=True)
    (run_dir / "file_out").symlink_to(arena_server.log_path)
    try:
        refused = ["..", "../log.txt", "checkpoints/../../manifest.yaml", "/etc/passwd", str(run_dir / "metrics.csv"),
                   "~/secrets", "..\\..\\manifest.yaml", "link_out", "link_out/server.log", "file_out"]
        for path in refused:
            response = owner.get(f"/v1/experiments/{job_id}/download", params={"path": path})
            assert response.status_code == 400, (path, response.status_code, response.text)
            assert response.json()["error"] == "bad_request"
        tarred = owner.get(f"/v1/experiments/{job_id}/download", params={"path": "."})
        assert tarred.status_code == 200
        with tarfile.open(fileobj=io.BytesIO(tarred.content)) as tar:
            names = tar.getnames()
        assert "metrics.csv" in names and not any(n.startswith("link_out") or n == "file_out" for n in names)
    finally:
        (run_dir / "link_out").unlink()
        (run_dir / "file_out").unlink()
    assert owner.get(f"/v1/experiments/{job_id}/download", params={"path": "nothing_here"}).status_code == 404

    checkpoints = owner.get(f"/v1/experiments/{job_id}/checkpoints").json()
    kinds = {entry["kind"] for entry in checkpoints}
    assert kinds == {"run", "elite"}, checkpoints
    last = [entry for entry in checkpoints if entry["kind"] == "run"][-1]
    assert last["path"] == "checkpoints/checkpoint_000001024" and last["bytes"] > 0
    archive = owner.get(f"/v1/experiments/{job_id}/download", params={"path": last["path"]})
    assert archive.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        members = tar.getmembers()
        assert "manifest.json" in [m.name for m in members]
        assert all(not m.name.startswith(("/", "..")) for m in members)
        saved = tar.extractfile("manifest.json")
        assert saved is not None
        assert saved.read() == (run_dir / last["path"] / "manifest.json").read_bytes()
    metrics = owner.get(f"/v1/experiments/{job_id}/metrics")
    assert metrics.headers["content-type"].startswith("text/csv")
    assert metrics.content == (run_dir / "metrics.csv").read_bytes()
    single = owner.get(f"/v1/experiments/{job_id}/download", params={"path": "summary.json"})
    assert single.headers["content-type"] == "application/octet-stream"
    assert single.content == (run_dir / "summary.json").read_bytes()
    owner.close()
    other.close()

    # the keys appear nowhere: server output (uvicorn access log included), store, job folders
    arena_server.stop()
    output = arena_server.output()
    assert "GET /v1/experiments/" in output  # the access log is on, and it was searched
    for key in (arena_server.key, other_key):
        assert key not in output
        assert key[len("arena_"):] not in output
        for file in _files(arena_server.data_dir):
            assert key.encode() not in file.read_bytes(), file


def _files(root: Path) -> list[Path]:
    found = []
    for folder, _, names in os.walk(root):
        found += [Path(folder, name) for name in names if not Path(folder, name).is_symlink()]
    assert found
    return found


@pytest.mark.parametrize("name", ["ci"])
def test_create_key_prints_only_the_key_and_stores_only_its_hash(tmp_path, name):
    import hashlib
    import re
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "agile_arena.server", "create-key", "--data-dir",
                             str(tmp_path / "data"), name], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and re.fullmatch(r"arena_[A-Za-z0-9_-]{43}", lines[0])
    with sqlite3.connect(tmp_path / "data" / "arena.sqlite3") as db:
        rows = db.execute("SELECT name, key_hash FROM keys").fetchall()
    assert rows == [(name, hashlib.sha256(lines[0].encode()).hexdigest())]
