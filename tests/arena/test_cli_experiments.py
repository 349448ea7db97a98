"""`agile arena experiments ...` and the `arena` command (the reference CLI's spellings), `--set` on
submit, progress in `status` and `list`, `delete`, experiments named by name or id prefix, against a
scripted server; and the reference example run unchanged through the real CLI against a live server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from agile_arena import ArenaClient
from agile_cli import main as cli_main
from agile_cli.main import main
from tests.arena.cli_fakes import run
from tests.arena.test_client import EXPERIMENT, PPO, ndjson

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ["submit", "list", "status", "logs", "stop", "resume", "delete", "checkpoints", "metrics", "download"]
PROGRESS = {"steps": 1024, "total_steps": 2048, "generation": 1, "fitness": 9.5, "best_fitness": 12.5,
            "updated_at": "2026-01-01T00:01:00+00:00"}


pytestmark = pytest.mark.usefixtures("isolated_settings")


# ------------------------------------------------------------------------------ spellings
@pytest.mark.parametrize("action", ACTIONS)
def test_every_experiment_action_is_also_under_experiments(capsys, action):
    assert main(["arena", "experiments", action, "--help"]) == 0
    assert f"usage: agile arena experiments {action}" in capsys.readouterr().out


def test_experiments_alone_prints_its_actions(capsys):
    code, _, err = run(capsys, "experiments")
    assert code == 2 and all(action in err for action in ACTIONS)


def test_the_reference_submit_line_sends_its_options_and_warns_about_nodes(fake, capsys, tmp_path):
    fake.on("POST", "/v1/experiments", httpx.Response(201, json=EXPERIMENT))
    code, out, err = run(capsys, "experiments", "submit", str(PPO), "--resource-id", "local", "--num-nodes", "2",
                         "--project", "my-project", "--experiment-name", "lunar-lander-dqn")
    assert code == 0 and "submitted exp1" in out
    body = json.loads(fake.requests[0].content)
    assert (body["resource_id"], body["project"], body["experiment_name"]) == ("local", "my-project",
                                                                             "lunar-lander-dqn")
    assert sum("warning" in line for line in err.splitlines()) == 1 and "runs on one node" in err


def test_the_arena_command_is_declared_and_is_agile_arena(capsys, monkeypatch):
    scripts = tomllib.loads((ROOT / "packages" / "agile-cli" / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["arena"] == "agile_cli.main:run_arena" and scripts["agile"] == "agile_cli.main:run"
    monkeypatch.setattr(sys, "argv", ["arena", "experiments", "--help"])
    with pytest.raises(SystemExit) as exited:
        cli_main.run_arena()
    assert exited.value.code == 0 and "usage: agile arena experiments" in capsys.readouterr().out


# ------------------------------------------------------------------------------ --set
def test_set_overrides_the_manifest_before_it_is_sent(fake, capsys):
    fake.on("POST", "/v1/experiments", httpx.Response(201, json=EXPERIMENT))
    code, _, _ = run(capsys, "submit", str(PPO), "--set", "training.pop_size=2", "--set", "algorithm.lr=0.002")
    assert code == 0
    sent = yaml.safe_load(json.loads(fake.requests[0].content)["manifest"])
    assert sent["training"]["pop_size"] == 2 and sent["algorithm"]["lr"] == 0.002
    code, _, _ = run(capsys, "experiments", "submit", str(PPO), "--set", "training.max_steps=300000")
    assert code == 0 and yaml.safe_load(json.loads(fake.requests[1].content)["manifest"])["training"]["max_steps"] == 300000


@pytest.mark.parametrize(("override", "expected"), [
    ("training.pop_size=-1", "--set training.pop_size=-1: training.pop_size:"),
    ("no_equals_sign", "--set no_equals_sign: --set expects dotted.key=value"),
])
def test_a_bad_set_is_reported_as_agile_train_reports_it_and_nothing_is_sent(fake, capsys, override, expected):
    code, out, err = run(capsys, "submit", str(PPO), "--set", override)
    assert code == 2 and expected in err, err
    assert fake.requests == []
    code, out, _ = run(capsys, "submit", str(PPO), "--set", override, "--json")
    assert code == 2 and json.loads(out)["error"] == "validation"


# ------------------------------------------------------------------------------ progress
def test_status_and_list_show_the_progress(fake, capsys):
    running = {**EXPERIMENT, "status": "running", "progress": PROGRESS}
    fake.on("GET", "/v1/experiments/exp1", httpx.Response(200, json=running))
    fake.on("GET", "/v1/experiments", httpx.Response(200, json=[running, {**EXPERIMENT, "id": "exp0",
                                                                          "progress": None}]))
    code, out, _ = run(capsys, "status", "exp1")
    assert code == 0
    assert "progress:     1024/2048 steps (50%)" in out and "generation:   1" in out
    assert "fitness:      9.50 (best 12.50)" in out and "updated_at:   2026-01-01T00:01:00+00:00" in out
    code, out, _ = run(capsys, "list")
    header, first, second = out.splitlines()
    assert "STEPS" in header and "FITNESS" in header
    assert "1024/2048 (50%)" in first and "9.50 (best 12.50)" in first and "exp0" in second
    assert json.loads(run(capsys, "status", "exp1", "--json")[1])["progress"] == PROGRESS


# ------------------------------------------------------------------------------ names, delete
def test_delete_names_what_it_deleted(fake, capsys):
    fake.on("GET", "/v1/experiments/cartp", httpx.Response(200, json={**EXPERIMENT, "status": "completed",
                                                                      "name": "cartpole"}))
    fake.on("DELETE", "/v1/experiments/exp1", httpx.Response(200, json={"id": "exp1", "deleted": True}))
    code, out, _ = run(capsys, "delete", "cartp")
    assert code == 0 and out.startswith("deleted exp1 'cartpole': completed")
    assert [r.method for r in fake.requests] == ["GET", "DELETE"]
    fake.on("GET", "/v1/experiments/exp1", httpx.Response(200, json={**EXPERIMENT, "status": "running"}))
    fake.on("DELETE", "/v1/experiments/exp1", httpx.Response(409, json={
        "error": "conflict", "message": "exp1 is running; stop it first (`agile arena stop exp1`), then delete it"}))
    code, _, err = run(capsys, "experiments", "delete", "exp1")
    assert code == 1 and "agile arena stop exp1" in err


def test_following_by_name_follows_the_experiment_it_names_now(fake, capsys):
    fake.on("GET", "/v1/experiments/cartp", httpx.Response(200, json={**EXPERIMENT, "name": "cartpole"}))
    fake.on("GET", "/v1/experiments/exp1/logs", ndjson({"type": "status", "status": "completed"}))
    fake.on("GET", "/v1/experiments/exp1", httpx.Response(200, json={**EXPERIMENT, "status": "completed"}))
    code, _, _ = run(capsys, "logs", "cartp", "--follow", "--reconnect-for", "600")
    assert code == 0 and fake.calls("GET", "/v1/experiments/exp1/logs")
    assert run(capsys, "logs", "cartp", "--follow", "--reconnect-for", "-1")[0] == 2


def test_an_ambiguous_name_exits_2_with_the_candidates(fake, capsys):
    message = "'cart' matches 2 experiments: exp1 'cartpole' (completed, ...); exp2 'cartpole2' (...)"
    fake.on("GET", "/v1/experiments/cart", httpx.Response(400, json={"error": "bad_request", "message": message}))
    code, _, err = run(capsys, "status", "cart")
    assert code == 2 and "exp1" in err and "exp2" in err


# ------------------------------------------------------------------------------ live
DQN = """\
algorithm: {name: DQN, lr: 1.0e-3, batch_size: 32, learn_step: 4}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 512, evo_steps: 256, pop_size: 2, eval_loop: 1, eval_steps: 50, learning_delay: 64, seed: 0}
network: {latent_dim: 8, encoder_config: {hidden_size: [8]}, head_config: {hidden_size: [8]}}
replay_buffer: {max_size: 2000}
"""


def arena_command_line() -> list[str]:
    """The installed `arena` command beside this Python, else the function it runs."""
    script = Path(sys.executable).parent / "arena"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from agile_cli.main import run_arena; run_arena()"]


@pytest.mark.slow
def test_the_reference_example_runs_unchanged_against_a_live_server(arena_server, tmp_path):
    env = {**os.environ, "AGILE_ARENA_CONFIG": str(tmp_path / "config" / "arena.json"), "OMP_NUM_THREADS": "1"}
    for name in ("AGILE_ARENA_API_KEY", "ARENA_API_KEY", "AGILE_ARENA_URL"):
        env.pop(name, None)
    (tmp_path / "dqn.yaml").write_text(DQN)

    def arena(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*arena_command_line(), *argv], input=stdin, capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)

    login = arena("login", "--api-key-stdin", "--url", arena_server.url, stdin=arena_server.key + "\n")
    assert login.returncode == 0, login.stderr
    assert arena_server.key not in login.stdout + login.stderr

    submitted = arena("experiments", "submit", "dqn.yaml", "--resource-id", "local", "--num-nodes", "2",
                      "--project", "my-project", "--experiment-name", "lunar-lander-dqn")
    assert submitted.returncode == 0, submitted.stderr
    assert [line for line in submitted.stderr.splitlines() if "warning" in line] == [
        "agile arena: warning: --num-nodes 2: this Arena server trains each experiment on one node; "
        "the job runs on one node"]
    experiment_id = submitted.stdout.split()[1]

    followed = arena("experiments", "logs", "lunar", "--follow")  # a name prefix names it
    assert followed.returncode == 0, followed.stdout + followed.stderr
    status = arena("experiments", "status", "lunar-lander-dqn")
    assert status.returncode == 0 and f"id:           {experiment_id}" in status.stdout
    assert "progress:     1024/1024 steps (100%)" in status.stdout, status.stdout
    shown = json.loads(arena("experiments", "list", "--json").stdout)
    assert [(e["id"], e["name"], e["project"], e["status"]) for e in shown] == [
        (experiment_id, "lunar-lander-dqn", "my-project", "completed")]
    assert shown[0]["progress"]["generation"] == 2 and shown[0]["progress"]["fitness"] is not None

    # the same from Python: ArenaClient().login() checks the key and stores it
    client = ArenaClient(url=arena_server.url, credentials_file=tmp_path / "py.json")
    assert client.login(arena_server.key) is not None and client.status(experiment_id[:6])["id"] == experiment_id
    client.close()

    deleted = arena("delete", experiment_id[:6])
    assert deleted.returncode == 0 and deleted.stdout.startswith(f"deleted {experiment_id}")
    assert not (arena_server.data_dir / "jobs" / experiment_id).exists()
    assert arena("experiments", "status", experiment_id).returncode == 1
