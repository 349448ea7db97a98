"""Arena server, in process and with no job running (the app's lifespan, which starts the scheduler, is
never entered): experiments named by name or id prefix, DELETE, resuming a job that never started,
the progress read from the run directory, and what the log shows instead of server paths."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from agile_arena.server.app import create_app
from agile_arena.server.auth import hash_key, new_key
from agile_arena.server.runner import Runner
from agile_arena.server.store import Store


@dataclass
class Server:
    http: TestClient
    store: Store
    data_dir: Path
    key_id: int

    def job(self, job_id: str, name: str | None = None, status: str = "queued") -> str:
        """A job row and folder, put in `status` directly (no worker runs)."""
        folder = self.data_dir / "jobs" / job_id
        folder.mkdir(parents=True)
        (folder / "log.txt").touch()
        self.store.add_job(job_id, self.key_id, name, None, "local", "PPO", "CartPole-v1")
        if status in ("running", "completed", "failed", "stopped", "interrupted"):
            self.store.mark_running(job_id, 999_999_999)
        if status != "running" and status != "queued":
            self.store.mark_finished(job_id, status, None, None)
        return job_id


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    data_dir = tmp_path / "data"
    app = create_app(data_dir)
    store: Store = app.state.store
    key = new_key()
    key_id = store.add_key("tests", hash_key(key))
    http = TestClient(app, headers={"Authorization": f"Bearer {key}"})
    yield Server(http, store, data_dir.resolve(), key_id)
    http.close()
    store.close()


# ------------------------------------------------------------------------------ names and prefixes
def test_an_experiment_is_named_by_its_name_or_the_start_of_its_id_or_name(server):
    first = server.job("3f2a9c1e7b6d4a05", "cartpole")
    second = server.job("3f2b000000000000", "lunar-lander")
    server.job("aaaa000000000000", "cartpole-long")
    assert server.http.get("/v1/experiments/lunar").json()["id"] == second
    assert server.http.get("/v1/experiments/3f2a").json()["id"] == first
    assert server.http.get("/v1/experiments/cartpole").json()["id"] == first  # the exact name wins over prefixes
    assert server.http.post("/v1/experiments/lunar-lander/stop").json()["status"] == "stopped"

    ambiguous = server.http.get("/v1/experiments/3f2")
    assert ambiguous.status_code == 400
    message = ambiguous.json()["message"]
    assert "'3f2' matches 2 experiments" in message and first in message and second in message

    assert server.http.get("/v1/experiments/zzz").status_code == 404
    assert server.http.get("/v1/experiments/3f").status_code == 404  # prefixes need 3 characters


def test_several_experiments_with_the_same_name_are_listed_not_guessed(server):
    server.job("1111000000000000", "same")
    server.job("2222000000000000", "same")
    response = server.http.get("/v1/experiments/same")
    assert response.status_code == 400
    assert "1111000000000000" in response.json()["message"] and "2222000000000000" in response.json()["message"]
    assert server.http.get("/v1/experiments/2222").json()["name"] == "same"


def test_another_keys_experiments_are_never_matched(server):
    other = server.store.add_key("other", hash_key(new_key()))
    (server.data_dir / "jobs" / "cccc000000000000").mkdir(parents=True)
    server.store.add_job("cccc000000000000", other, "theirs", None, "local", "PPO", "CartPole-v1")
    assert server.http.get("/v1/experiments/theirs").status_code == 404
    assert server.http.get("/v1/experiments/cccc").status_code == 404
    assert server.http.get("/v1/experiments/cccc000000000000").status_code == 404


# ------------------------------------------------------------------------------ delete
def test_a_finished_experiment_is_deleted_with_its_folder(server):
    job = server.job("dddd000000000000", "done", status="completed")
    run = server.data_dir / "jobs" / job / "run" / "checkpoints" / "c1"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    (run / "locked").mkdir()
    (run / "locked" / "f").write_text("x")
    (run / "locked").chmod(0o500)  # a folder the job made read-only
    (run / "link").symlink_to(server.data_dir / "arena.sqlite3")  # links are removed, not followed
    response = server.http.delete("/v1/experiments/done")
    assert response.status_code == 200 and response.json() == {"id": job, "deleted": True}
    assert not (server.data_dir / "jobs" / job).exists() and (server.data_dir / "arena.sqlite3").exists()
    assert [p.name for p in (server.data_dir / "jobs").iterdir()] == []
    assert server.http.get(f"/v1/experiments/{job}").status_code == 404
    assert server.http.delete(f"/v1/experiments/{job}").status_code == 404
    assert server.store.get(job) is None


@pytest.mark.parametrize("status", ["queued", "running"])
def test_a_queued_or_running_experiment_must_be_stopped_before_it_is_deleted(server, status):
    job = server.job("eeee000000000000", status=status)
    response = server.http.delete(f"/v1/experiments/{job}")
    assert response.status_code == 409
    assert response.json()["error"] == "conflict"
    assert f"stop it first (`agile arena stop {job}`)" in response.json()["message"]
    assert (server.data_dir / "jobs" / job).is_dir() and server.store.get(job) is not None


def test_deleted_folders_left_by_a_dead_server_are_removed_at_the_next_start(server):
    leftover = server.data_dir / "jobs" / ".deleted-ffff000000000000-0000"
    (leftover / "run").mkdir(parents=True)
    Runner(server.store, server.data_dir, slots=1).remove_trash()
    assert not leftover.exists()


# ------------------------------------------------------------------------------ resume
def test_a_job_stopped_before_it_started_resumes_from_the_beginning(server):
    job = server.job("abab000000000000", "never-ran")
    assert server.http.post(f"/v1/experiments/{job}/stop").json()["status"] == "stopped"
    resumed = server.http.post(f"/v1/experiments/{job}/resume")
    assert resumed.status_code == 200 and resumed.json()["status"] == "queued"
    row = server.store.get(job)
    assert row is not None and row.status == "queued" and not row.resume  # fresh: there is no checkpoint
    log = (server.data_dir / "jobs" / job / "log.txt").read_text()
    assert "it never started, so it starts from the beginning" in log


def test_a_job_that_ran_without_saving_a_checkpoint_cannot_resume(server):
    job = server.job("acac000000000000", status="stopped")
    response = server.http.post(f"/v1/experiments/{job}/resume")
    assert response.status_code == 409
    assert "saved no checkpoint" in response.json()["message"] and "submit its manifest again" in response.json()["message"]


# ------------------------------------------------------------------------------ progress
HISTORY_LINE = {"generation": 1, "step": 1024, "time": 0.0, "mutable": [], "elite_id": 1,
                "agents": [{"slot": 0, "id": 0, "fitness": 8.5}, {"slot": 1, "id": 1, "fitness": 9.5}]}


def write_run(job_dir: Path, metrics_rows: list[str], history: list[dict[str, object]]) -> Path:
    run = job_dir / "run"
    run.mkdir(exist_ok=True)
    (run / "manifest.resolved.json").write_text(json.dumps({"training": {"max_steps": 1024, "pop_size": 2,
                                                                         "num_epochs": None}}))
    (run / "metrics.csv").write_text("step,name,value,wall_time\n" + "".join(f"{row}\n" for row in metrics_rows))
    (run / "metrics.history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in history))
    return run


def test_progress_is_read_from_the_run_directory(server):
    job = server.job("bbbb000000000000", "running-one", status="running")
    assert server.http.get(f"/v1/experiments/{job}").json()["progress"] is None  # nothing written yet
    run = write_run(server.data_dir / "jobs" / job, ["512,train/loss,0.5,1.0", "1024,eval/mean_return,9.0,2.0"],
                    [HISTORY_LINE])
    with open(run / "metrics.csv", "a") as metrics:
        metrics.write("1536,train/lo")  # a row being written: not counted yet
    progress = server.http.get(f"/v1/experiments/{job}").json()["progress"]
    assert progress["updated_at"]
    assert {k: v for k, v in progress.items() if k != "updated_at"} == {
        "steps": 1024, "total_steps": 2048, "generation": 1, "fitness": 9.5, "best_fitness": 9.5}

    with open(run / "metrics.csv", "a") as metrics:
        metrics.write("ss,0.4,3.0\n1600,train/loss,0.3,4.0\n")
    worse = {**HISTORY_LINE, "generation": 2, "step": 1600,
             "agents": [{"fitness": 7.0}, {"fitness": None}, {"fitness": "NaN"}]}
    with open(run / "metrics.history.jsonl", "a") as history:
        history.write(json.dumps(worse) + "\n" + "{not json\n")  # a broken line is skipped
    listed = server.http.get("/v1/experiments").json()
    assert [e["progress"]["steps"] for e in listed] == [1600]
    assert (listed[0]["progress"]["generation"], listed[0]["progress"]["fitness"],
            listed[0]["progress"]["best_fitness"]) == (2, 7.0, 9.5)

    # a resumed run rewrites its history (a new file): it is read again from the start
    (run / "metrics.history.jsonl").unlink()
    (run / "metrics.history.jsonl").write_text(json.dumps({**HISTORY_LINE, "agents": [{"fitness": 3.0}]}) + "\n")
    progress = server.http.get(f"/v1/experiments/{job}").json()["progress"]
    assert (progress["generation"], progress["best_fitness"]) == (1, 3.0)


def test_progress_never_reads_outside_the_job_folder(server, tmp_path):
    job = server.job("b0b0000000000000", status="running")
    run = server.data_dir / "jobs" / job / "run"
    run.mkdir()
    outside = tmp_path / "outside.csv"
    outside.write_text("step,name,value,wall_time\n99999,x,1,1\n")
    (run / "metrics.csv").symlink_to(outside)
    os.mkfifo(run / "metrics.history.jsonl")  # would block a reader that opened it blindly
    assert server.http.get(f"/v1/experiments/{job}").json()["progress"] is None


# ------------------------------------------------------------------------------ what users read
def test_log_lines_never_show_the_servers_folders(server):
    job = server.job("c0c0000000000000", status="failed")
    job_dir = server.data_dir / "jobs" / job
    (job_dir / "log.txt").write_text(f"checkpoint saved at {job_dir}/run/checkpoints/c1\n"
                                     f"cannot read {server.data_dir}/jobs/other/x\n")
    lines = [json.loads(line) for line in server.http.get(f"/v1/experiments/{job}/logs").text.splitlines()]
    texts = [event["line"] for event in lines if event["type"] == "log"]
    assert texts == ["checkpoint saved at run/checkpoints/c1", "cannot read <server data>/jobs/other/x"]
    assert lines[-1]["offset"] == (job_dir / "log.txt").stat().st_size  # offsets count the bytes as written


def test_recovery_and_shutdown_messages_speak_to_the_client_user(server):
    job = server.job("c1c1000000000000", status="running")
    checkpoint = server.data_dir / "jobs" / job / "run" / "checkpoints" / "checkpoint_000000512"
    checkpoint.mkdir(parents=True)
    (checkpoint / "manifest.json").write_text("{}")
    Runner(server.store, server.data_dir, slots=1).recover()
    error = server.http.get(f"/v1/experiments/{job}").json()["error"]
    assert error == f"the server stopped while the job ran; `agile arena resume {job}` continues it from its " \
                    "last checkpoint"
    assert "POST" not in error and str(server.data_dir) not in error


def test_the_worker_reports_a_stop_without_speaking_of_ctrl_c():
    from agile_arena.server.worker import STOP_MESSAGES, sigterm_as_interrupt
    from agile_core.training.interrupt import InterruptGuard

    previous = signal.getsignal(signal.SIGTERM)
    captured = io.StringIO()
    try:
        sigterm_as_interrupt()
        with contextlib.redirect_stderr(captured), InterruptGuard() as guard:
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
            assert guard.requested and guard.urgent
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [line for line in captured.getvalue().splitlines() if line] == list(STOP_MESSAGES)
    assert "Ctrl-C" not in captured.getvalue()


def test_progress_of_an_llm_run_counts_the_population_not_one_member(server):
    """LLM loops log `step` per member; perf/global_steps is the population's total."""
    job = server.job("cccc000000000000", "llm", status="running")
    write_run(server.data_dir / "jobs" / job, ["100,train/loss,0.5,1.0", "100,perf/global_steps,200.0,1.0",
                                               "100,eval/fitness,0.4,1.0"], [])
    progress = server.http.get(f"/v1/experiments/{job}").json()["progress"]
    assert (progress["steps"], progress["total_steps"]) == (200, 2048)
