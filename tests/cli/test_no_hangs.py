"""Inputs that used to hang a command: each now ends within seconds with a clear error (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", ["validate", "train"])
def test_a_fifo_without_a_writer_is_refused_and_one_with_a_writer_is_read(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "manifest.yaml"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "agile_cli.main", command, str(fifo)], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 2, result.stderr
    assert "FIFO without a writer" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 30
    if command == "validate":  # `agile validate <(...)`: a FIFO with a writer reads as a file
        writer = subprocess.Popen(["sh", "-c", f"cat '{ROOT / 'configs/training/ppo_cartpole.yaml'}' > '{fifo}'"])
        read = subprocess.run([sys.executable, "-m", "agile_cli.main", "validate", str(fifo)], capture_output=True,
                              text=True, timeout=60)
        writer.wait(timeout=30)
        assert read.returncode == 0 and "valid (PPO" in read.stdout, read.stderr


def test_a_second_run_in_a_busy_run_directory_is_refused_and_the_first_finishes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    manifest = ROOT / "configs/training/dqn_cartpole.yaml"
    common = ["--set", "training.evo_steps=256", "--set", "training.learning_delay=64", "--quiet", "--run-dir",
              str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, "-m", "agile_cli.main", "train", str(manifest), *common,
                              "--set", "training.max_steps=4096"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    lock = run_dir / ".lock"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    second = subprocess.run([sys.executable, "-m", "agile_cli.main", "train", str(manifest), *common,
                             "--set", "training.max_steps=256"], env=env, capture_output=True, text=True, timeout=120)
    _, err = first.communicate(timeout=300)
    assert second.returncode == 2, second.stderr
    assert f"in use by another run (pid {first.pid})" in second.stderr and "Traceback" not in second.stderr
    assert first.returncode == 0, err
    history = (run_dir / "metrics.history.jsonl").read_text().splitlines()
    assert history and all(line.startswith("{") for line in history)


@pytest.mark.parametrize(("manifest", "overrides", "message"), [
    ("dqn_cartpole.yaml", ["network.encoder_config.hidden_size=[1000000,1000000]",
                           "network.encoder_config.max_mlp_nodes=10000000"],
     "network: the population's networks would need about 116.4 TB (2,000,148,008,964 parameters per member x 4 "
     "members, with gradients and optimizer state)"),
    ("ppo_cartpole.yaml", ["network.latent_dim=100000000", "network.max_latent_dim=1000000000"],
     "network: the population's networks would need about 1.1 TB"),
    ("maddpg_speaker_listener.yaml", ["network.encoder_config.hidden_size=[1000000,1000000]",
                                      "network.encoder_config.max_mlp_nodes=10000000"],
     "network: the population's networks would need about"),
    ("ppo_cartpole.yaml", ["algorithm.update_epochs=1000000"],
     "algorithm.update_epochs: input should be less than or equal to 1000 (got 1000000)"),
], ids=["mlp-width", "latent-dim", "multi-agent", "update-epochs"])
def test_sizes_past_the_machine_are_refused_naming_the_limit(manifest: str, overrides: list[str], message: str,
                                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agile_cli.main import main

    sets = [arg for override in overrides for arg in ("--set", override)]
    started = time.monotonic()
    code = main(["train", str(ROOT / "configs/training" / manifest), *sets, "--quiet", "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err, err
    assert time.monotonic() - started < 60


def test_a_huge_evaluate_episode_count_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from agile_cli.main import main

    assert main(["evaluate", "elite", "--env", "CartPole-v1", "--episodes", "1000000000"]) == 2
    assert "argument --episodes: expected an integer in 1..100,000, got 1,000,000,000" in capsys.readouterr().err
