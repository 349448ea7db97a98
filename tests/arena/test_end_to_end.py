"""A real Arena server (fixture `arena_server`): create a key, submit a small PPO CartPole
manifest, follow its log to completion, download the elite and `agile evaluate` it; once with
ArenaClient, once with the `agile arena` commands."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path

import pytest

from agile_arena import ArenaClient, ArenaNotFoundError, LogEvent, StatusEvent
from agile_cli.main import main

pytestmark = pytest.mark.slow  # a server process plus one training worker per job

# Small enough to finish in seconds once the worker has imported torch; two generations so that
# evolution, checkpoints and the elite all happen.
TINY_PPO = """\
algorithm:
  name: PPO
  lr: 1.0e-3
  learn_step: 64
  batch_size: 32
  update_epochs: 1
environment:
  name: CartPole-v1
  num_envs: 2
training:
  max_steps: 256
  evo_steps: 128
  pop_size: 2
  eval_loop: 1
  seed: 0
network:
  latent_dim: 8
  encoder_config:
    hidden_size: [8]
  head_config:
    hidden_size: [8]
"""


@pytest.fixture
def manifest(tmp_path) -> Path:
    path = tmp_path / "ppo_tiny.yaml"
    path.write_text(TINY_PPO)
    return path


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path, monkeypatch):
    for name in ("AGILE_ARENA_API_KEY", "ARENA_API_KEY", "AGILE_ARENA_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGILE_ARENA_CONFIG", str(tmp_path / "config" / "arena.json"))


def evaluate(capsys, checkpoint: Path) -> dict[str, float]:
    capsys.readouterr()
    assert main(["evaluate", str(checkpoint), "--env", "CartPole-v1", "--episodes", "2", "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_client_submits_follows_downloads_and_the_elite_evaluates(arena_server, manifest, tmp_path, capsys):
    key = arena_server.create_key("e2e-client")
    with ArenaClient(api_key=key, url=arena_server.url) as client:
        assert client.health()["status"] == "ok"
        submitted = client.submit(manifest, experiment_name="tiny-ppo", project="tests")
        assert submitted["status"] in ("queued", "running") and submitted["algorithm"] == "PPO"
        assert submitted["name"] == "tiny-ppo" and submitted["environment"] == "CartPole-v1"
        experiment_id = submitted["id"]

        events = list(client.logs(experiment_id, follow=True))
        statuses = [e.status for e in events if isinstance(e, StatusEvent)]
        lines = [e for e in events if isinstance(e, LogEvent)]
        assert statuses[-1] == "completed", "\n".join(e.line for e in lines)
        assert lines and [e.offset for e in lines] == sorted({e.offset for e in lines})  # no line twice

        finished = client.status(experiment_id)
        assert finished["status"] == "completed" and finished["exit_code"] == 0
        assert [e["id"] for e in client.list_experiments()] == [experiment_id]
        assert any(c["kind"] == "elite" for c in client.checkpoints(experiment_id))

        elite = client.download(experiment_id, "elite", tmp_path / "downloads")
        assert elite == tmp_path / "downloads" / "elite" and any(elite.iterdir())
        metrics = client.download_metrics(experiment_id, tmp_path / "metrics.csv")
        assert list(csv.reader(io.StringIO(metrics.read_text())))[1:], "empty metrics"

        # the log from an offset in the middle: only what came after it
        middle = lines[len(lines) // 2].offset
        tail = [e for e in client.logs(experiment_id, offset=middle) if isinstance(e, LogEvent)]
        assert tail == [e for e in lines if e.offset > middle]

    result = evaluate(capsys, elite)
    assert math.isfinite(result["mean_return"]) and result["mean_return"] >= 8  # CartPole lasts >= 8 steps

    with ArenaClient(api_key=arena_server.create_key("someone-else"), url=arena_server.url) as other:
        assert other.list_experiments() == []
        with pytest.raises(ArenaNotFoundError):
            other.status(experiment_id)
    for file in Path(arena_server.data_dir).rglob("*"):
        if file.is_file() and file.suffix in (".txt", ".json", ".yaml", ".csv", ".log"):
            assert key not in file.read_text(errors="replace"), file


def test_the_cli_logs_in_submits_follows_and_downloads(arena_server, manifest, tmp_path, capsys, monkeypatch):
    key = arena_server.create_key("e2e-cli")
    monkeypatch.setattr(sys, "stdin", io.StringIO(key + "\n"))
    assert main(["arena", "login", "--api-key-stdin", "--url", arena_server.url]) == 0
    out, err = capsys.readouterr()
    assert key not in out + err

    assert main(["arena", "submit", str(manifest), "--name", "cli-tiny", "--follow"]) == 0
    out, err = capsys.readouterr()
    assert key not in out + err
    assert "completed" in err

    assert main(["arena", "list", "--json"]) == 0
    (experiment,) = json.loads(capsys.readouterr().out)
    assert experiment["name"] == "cli-tiny" and experiment["status"] == "completed"
    experiment_id = experiment["id"]

    assert main(["arena", "checkpoints", experiment_id, "--json"]) == 0
    assert "elite" in {c["kind"] for c in json.loads(capsys.readouterr().out)}
    assert main(["arena", "download", experiment_id, "elite", "--output", str(tmp_path / "dl")]) == 0
    assert main(["arena", "metrics", experiment_id, "--output", str(tmp_path / "metrics.csv")]) == 0
    assert (tmp_path / "metrics.csv").read_text().startswith("step,")
    assert main(["arena", "logs", experiment_id]) == 0
    assert "PPO" in capsys.readouterr().out

    result = evaluate(capsys, tmp_path / "dl" / "elite")
    assert math.isfinite(result["mean_return"])

    assert main(["arena", "status", "no-such-experiment"]) == 1  # not found
    assert main(["arena", "resume", experiment_id]) == 1  # a completed job cannot resume (conflict)
    capsys.readouterr()
