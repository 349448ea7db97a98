"""The job sandbox against a hostile tenant: two tenants on one server; tenant A's environment code
tries, one job at a time, to read tenant B's job folder and the server's data folder, to write
outside its folder, to open network connections, to fork past the process limit and to allocate
past the memory limit. Each attempt is denied, each job fails with the denial as its error, and
tenant B's job, training meanwhile, completes untouched."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import httpx
import pytest

from tests.arena.conftest import (
    SANDBOX,
    ArenaServer,
    launch_arena_server,
    tiny_ppo_manifest,
    wait_for,
)

pytestmark = pytest.mark.skipif(not SANDBOX and not os.environ.get("AGILE_REQUIRE_SANDBOX"),
                                reason="needs bubblewrap (apt-get install bubblewrap)")

HOSTILE_ENV = '''
"""A tenant's environment factory that attacks the server before it builds CartPole."""
import os, socket, time
import gymnasium


def make(action, target="", **kwargs):
    if action == "read":
        if os.path.isdir(target):
            print("STOLEN listing", os.listdir(target))
        else:
            print("STOLEN", open(target, "rb").read()[:200])
    elif action == "write":
        with open(target, "w") as handle:
            handle.write("pwned")
        print("WROTE", target)
    elif action == "connect":
        host, port = target.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=5).close()
        print("CONNECTED", target)
    elif action == "fork":
        children = []
        for _ in range(int(target)):
            pid = os.fork()
            if pid == 0:
                time.sleep(20)
                os._exit(0)
            children.append(pid)
        print("FORKED", len(children))
    elif action == "memory":
        block = bytearray(int(target))
        print("ALLOCATED", len(block))
    return gymnasium.make("CartPole-v1", **kwargs)
'''

MEMORY_GIB = 6
PROCESSES = 96


def hostile_manifest(action: str, target: str) -> str:
    return tiny_ppo_manifest().replace(
        "  name: CartPole-v1\n",
        f"  name: CartPole-v1\n  entrypoint: hostile_env:make\n  config: {{action: {action}, target: '{target}'}}\n")


@pytest.fixture
def two_tenant_server(tmp_path: Path):
    code = tmp_path / "tenant_code"
    code.mkdir()
    (code / "hostile_env.py").write_text(HOSTILE_ENV)
    server = launch_arena_server(tmp_path / "arena", slots=2, env={"PYTHONPATH": str(code)},
                                 extra_args=("--job-memory-gib", str(MEMORY_GIB), "--job-processes", str(PROCESSES)))
    try:
        yield server
    finally:
        server.stop(timeout=60)
        server.kill()


def submit(http: httpx.Client, manifest: str) -> str:
    response = http.post("/v1/experiments", json={"manifest": manifest, "filename": "exp.yaml"})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def finished(http: httpx.Client, job_id: str, timeout: float = 240.0) -> dict:
    def done() -> dict | None:
        body = http.get(f"/v1/experiments/{job_id}").json()
        return body if body["status"] in ("completed", "failed", "stopped", "interrupted") else None

    return wait_for(done, timeout, f"experiment {job_id} to finish", interval=0.5)


def log_of(http: httpx.Client, job_id: str) -> str:
    """The job's log lines (the endpoint streams one JSON event per line)."""
    events = [json.loads(line) for line in http.get(f"/v1/experiments/{job_id}/logs").text.splitlines() if line]
    return "\n".join(event["line"] for event in events if event.get("type") == "log")


def test_a_hostile_tenant_is_denied_everything_and_the_other_tenant_is_unaffected(two_tenant_server: ArenaServer,
                                                                                   tmp_path: Path) -> None:
    server = two_tenant_server
    key_b = server.create_key("tenant-b")
    port = server.url.rsplit(":", 1)[1]
    outside = tmp_path / f"outside-{uuid.uuid4().hex}.txt"
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}, timeout=60) as a, \
            httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key_b}"}, timeout=60) as b:
        victim = submit(b, tiny_ppo_manifest(max_steps=6144, evo_steps=1024, checkpoint_steps=1024))
        victim_dir = server.data_dir / "jobs" / victim
        wait_for(lambda: (victim_dir / "manifest.yaml").exists(), 60, "tenant B's job folder")
        attacks = {
            "read the other tenant's manifest": ("read", str(victim_dir / "manifest.yaml"), ("No such file",)),
            "list the server's data folder": ("read", str(server.data_dir), ()),
            "read the server's store": ("read", str(server.data_dir / "arena.sqlite3"), ("No such file",)),
            "write outside the job folder": ("write", str(outside), ("No such file", "Read-only", "Permission denied")),
            "write into the server's data folder": ("write", str(server.data_dir / "pwned"),
                                                    ("No such file", "Read-only", "Permission denied")),
            "connect to the server's port": ("connect", f"127.0.0.1:{port}",
                                             ("Connection refused", "Network is unreachable")),
            "connect to the internet": ("connect", "1.1.1.1:80", ("Network is unreachable",)),
            "fork past the process limit": ("fork", str(PROCESSES * 2), ("Resource temporarily unavailable",)),
            "allocate past the memory limit": ("memory", str((MEMORY_GIB + 2) * 1024**3), ("MemoryError",)),
        }
        for what, (action, target, denials) in attacks.items():
            job = finished(a, submit(a, hostile_manifest(action, target)))
            log = log_of(a, job["id"])
            if not denials:
                # inside the sandbox the data folder is an empty mount holding only the path down to
                # the job's own folder: the listing shows neither the store nor any other job
                listing = next(line for line in log.splitlines() if "STOLEN listing" in line)
                assert listing.endswith("['jobs']") and victim not in log and "arena.sqlite3" not in log, listing
                continue
            assert job["status"] == "failed", (what, job, log[-2000:])
            assert not any(word in log for word in ("STOLEN", "WROTE", "CONNECTED", "FORKED", "ALLOCATED")), \
                (what, log[-2000:])
            assert any(denial in (job.get("error") or "") for denial in denials), (what, job, log[-2000:])
            assert "sandbox: bubblewrap" in log, log[:2000]
        assert not outside.exists() and not (server.data_dir / "pwned").exists()
        result = finished(b, victim)
        assert result["status"] == "completed", (result, log_of(b, victim)[-2000:])
        assert "STOLEN" not in log_of(b, victim)
        assert key_b not in "".join(log_of(a, job_id) for job_id in
                                    [e["id"] for e in a.get("/v1/experiments").json()])
