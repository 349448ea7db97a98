"""Arena server faults: SIGKILL the server mid-job (its worker dies with it), restart on the same data
directory, resume from the checkpoint; stop a running job (SIGTERM: it checkpoints) and resume; the
job always ends at the step count of an uninterrupted run."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from pathlib import Path

import httpx
import pytest

from tests.arena.conftest import tiny_ppo_manifest, wait_for

MAX_STEPS, EVO_STEPS, POP_SIZE = 2048, 256, 2
UNINTERRUPTED_TOTAL = MAX_STEPS * POP_SIZE
"""An uninterrupted run's final step: every generation adds evo_steps per agent (a multiple of
num_envs), so it ends exactly at max_steps per agent (test_server_queue checks it on a real run)."""


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def worker_pid(data_dir: Path, job_id: str) -> int | None:
    with sqlite3.connect(data_dir / "arena.sqlite3") as db:
        row = db.execute("SELECT pid FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return row[0] if row else None


def run_checkpoints(http: httpx.Client, job_id: str) -> list[str]:
    listed = http.get(f"/v1/experiments/{job_id}/checkpoints").json()
    return [entry["path"] for entry in listed if entry["kind"] == "run"]


@pytest.mark.slow  # two server starts and three worker processes
def test_kill_restart_resume_then_stop_and_resume_reach_the_uninterrupted_step_count(arena_server):
    manifest = tiny_ppo_manifest(max_steps=MAX_STEPS, evo_steps=EVO_STEPS, checkpoint_steps=EVO_STEPS)
    http = httpx.Client(base_url=arena_server.url, headers={"Authorization": f"Bearer {arena_server.key}"},
                        timeout=120)
    job_id = http.post("/v1/experiments", json={"manifest": manifest}).json()["id"]
    wait_for(lambda: run_checkpoints(http, job_id), 300, "a first checkpoint")
    pid = worker_pid(arena_server.data_dir, job_id)
    assert pid is not None and alive(pid)

    # 1. SIGKILL the server: the worker must not outlive it (PR_SET_PDEATHSIG)
    arena_server.kill()
    wait_for(lambda: not alive(pid), 15, "the worker to die with the server")
    arena_server.start()
    http = httpx.Client(base_url=arena_server.url, headers=http.headers, timeout=120)
    job = http.get(f"/v1/experiments/{job_id}").json()
    assert job["status"] == "interrupted" and "resume" in job["error"], job
    before_resume = run_checkpoints(http, job_id)
    assert before_resume and before_resume[-1] != f"checkpoints/checkpoint_{MAX_STEPS:09d}"
    resumed = http.post(f"/v1/experiments/{job_id}/resume")
    assert resumed.status_code == 200 and resumed.json()["status"] == "queued", resumed.text
    assert http.post(f"/v1/experiments/{job_id}/resume").status_code == 409  # already queued

    # 2. stop it again once it saved a new checkpoint: SIGTERM, interrupt checkpoint, exit 130
    wait_for(lambda: len(run_checkpoints(http, job_id)) > len(before_resume), 300, "a checkpoint after resuming")
    stopped = http.post(f"/v1/experiments/{job_id}/stop").json()
    assert stopped["status"] in ("stopped", "completed"), stopped
    if stopped["status"] == "stopped":  # (unless the run finished first on a very fast machine)
        assert stopped["exit_code"] == 130, stopped
        assert http.post(f"/v1/experiments/{job_id}/resume").json()["status"] == "queued"

    # 3. it runs to the end, from its checkpoints, to the uninterrupted step count
    final = wait_for(lambda: (j := http.get(f"/v1/experiments/{job_id}").json())["status"] not in
                     ("queued", "running") and j, 300, "the resumed job to finish")
    log = http.get(f"/v1/experiments/{job_id}/logs").text
    assert final["status"] == "completed", (final, log[-3000:])
    run_dir = arena_server.data_dir / "jobs" / job_id / "run"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_steps"] == UNINTERRUPTED_TOTAL
    with open(run_dir / "metrics.csv", newline="") as handle:
        steps = [int(row["step"]) for row in csv.DictReader(handle)]
    assert max(steps) == UNINTERRUPTED_TOTAL
    assert steps == sorted(steps)  # the resumed runs replaced rows after their checkpoint, no duplicates
    assert run_checkpoints(http, job_id)[-1] == f"checkpoints/checkpoint_{MAX_STEPS:09d}"
    with open(run_dir / "metrics.events.csv", newline="") as handle:
        configs = [int(row["step"]) for row in csv.DictReader(handle) if row["name"] == "run/config"]
    assert configs[0] == 0 and len(configs) >= 2 and all(step > 0 for step in configs[1:]), configs
    assert log.count("resuming from the last checkpoint") >= 1
    assert not alive(pid) and os.path.isdir(run_dir / "elite")
    # every checkpoint the interrupted, stopped and resumed runs left loads, digests checked
    from agile_core.training.checkpointing import load_population

    left = sorted((run_dir / "checkpoints").glob("checkpoint_*"))
    assert [f"checkpoints/{path.name}" for path in left] == run_checkpoints(http, job_id)
    for path in left:
        assert len(load_population(path).agents) == POP_SIZE, path
    http.close()
