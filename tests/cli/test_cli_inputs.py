"""CLI input: resuming from a run directory finds its latest checkpoint, a checkpoint of another run
(algorithm, population size, spaces) is refused naming both values, and unwritable output paths
exit 2 cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agile_cli.main import main

ROOT = Path(__file__).resolve().parents[2]

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "training"
DQN = ["--set", "training.evo_steps=256", "--set", "training.learning_delay=64", "--set", "training.eval_steps=50",
       "--quiet"]


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("resume") / "dqn"
    assert main(["train", str(CONFIGS / "dqn_cartpole.yaml"), *DQN, "--set", "training.max_steps=512",
                 "--set", "training.pop_size=2", "--checkpoint-steps", "256", "--run-dir", str(run)]) == 0
    return run


def test_resume_from_a_run_directory_continues_its_latest_checkpoint(dqn_run, tmp_path):
    args = ["train", str(CONFIGS / "dqn_cartpole.yaml"), *DQN, "--set", "training.max_steps=768",
            "--set", "training.pop_size=2", "--run-dir", str(tmp_path / "more"), "--resume-from-checkpoint", str(dqn_run)]
    assert main(args) == 0


@pytest.mark.parametrize(("manifest", "sets", "expected"), [
    ("dqn_cartpole.yaml", ["--set", "training.pop_size=3"], "population size: the checkpoint has 2, the manifest 3"),
    ("ppo_cartpole.yaml", ["--set", "training.pop_size=2", "--set", "training.evo_steps=2048"],
     "algorithm: the checkpoint has DQN, the manifest PPO"),
    ("dqn_cartpole.yaml", ["--set", "training.pop_size=2", "--set", "environment.name=Acrobot-v1"],
     "observation_space (environment): the checkpoint has Box("),
], ids=["pop-size", "algorithm", "environment"])
def test_resume_with_another_runs_checkpoint_is_refused(dqn_run, tmp_path, capsys, manifest, sets, expected):
    args = ["train", str(CONFIGS / manifest), "--set", "training.max_steps=10000", *sets, "--quiet",
            "--run-dir", str(tmp_path / "other"), "--resume-from-checkpoint", str(dqn_run)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and expected in err and "Traceback" not in err


@pytest.mark.parametrize("args", [
    ["train", str(CONFIGS / "ppo_cartpole.yaml"), "--run-dir", "/proc/no-such/run"],
    ["schema", "-o", "/proc/no-such/schema.json"],
], ids=["train-run-dir", "schema-out"])
def test_unwritable_output_paths_exit_2_cleanly(args, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "cannot" in err and "Traceback" not in err


def test_plot_into_an_unusable_folder_exits_2(dqn_run, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["plot", str(dqn_run), "--out", str(blocker / "plots")]) == 2
    assert "cannot write the figures" in capsys.readouterr().err


def test_a_truncated_checkpoint_file_is_named(dqn_run, tmp_path, capsys):
    import shutil

    latest = sorted((dqn_run / "checkpoints").iterdir())[-1]
    damaged = tmp_path / latest.name
    shutil.copytree(latest, damaged)
    weights = damaged / "agent_0.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    args = ["train", str(CONFIGS / "dqn_cartpole.yaml"), "--set", "training.max_steps=10000", "--set",
            "training.pop_size=2", "--quiet", "--run-dir", str(tmp_path / "r"), "--resume-from-checkpoint", str(damaged)]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "agent_0.safetensors" in err and "no complete checkpoint" not in err


def test_checkpoint_steps_below_one_is_refused(capsys):
    assert main(["train", str(CONFIGS / "ppo_cartpole.yaml"), "--checkpoint-steps", "0"]) == 2
    assert "expected an integer >= 1, got 0" in capsys.readouterr().err


def test_the_manifests_checkpoint_path_is_honoured(tmp_path):
    where = tmp_path / "my-checkpoints"
    args = ["train", str(CONFIGS / "dqn_cartpole.yaml"), *DQN, "--set", "training.max_steps=256", "--set",
            "training.pop_size=1", "--set", f"training.checkpoint_path={where}", "--set", "training.checkpoint_steps=256",
            "--run-dir", str(tmp_path / "run")]
    assert main(args) == 0
    assert any(where.iterdir()) and not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(("under_uv", "start"), [(True, "uv run agile train"), (False, "agile train")])
def test_the_resume_hint_starts_the_way_the_run_was_started(monkeypatch, tmp_path, under_uv, start):
    from agile_cli.commands.train import _resume_hint
    from agile_cli.main import build_parser
    from agile_core.training.interrupt import TrainingInterrupted

    if under_uv:
        monkeypatch.setenv("UV_RUN_RECURSION_DEPTH", "1")
    else:
        monkeypatch.delenv("UV_RUN_RECURSION_DEPTH", raising=False)
    args = build_parser().parse_args(["train", "m.yaml", "--set", "training.pop_size=2"])
    hint = _resume_hint(TrainingInterrupted(tmp_path / "ckpt", 10), args, tmp_path / "run")
    assert hint.startswith(start + " m.yaml --set training.pop_size=2")
    assert hint.endswith(f"--resume-from-checkpoint {tmp_path / 'ckpt'}")


def test_evaluate_on_an_env_with_other_spaces_says_so(tmp_path, capsys):
    import gymnasium as gym

    from agile_offpolicy import DQN

    env = gym.make("CartPole-v1")
    DQN(env.observation_space, env.action_space, seed=0).save_checkpoint(tmp_path / "agent")
    assert main(["evaluate", str(tmp_path / "agent"), "--env", "Acrobot-v1", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "the spaces of Acrobot-v1 do not match the agent's" in err and "Traceback" not in err


@pytest.mark.parametrize(("command", "value", "expected"), [
    ("train", "bogus", "unknown torch device 'bogus'"),
    ("train", "cuda:97", "'cuda:97'"),
    ("evaluate", "gpu", "unknown torch device 'gpu'"),
])
def test_a_device_this_machine_lacks_is_a_usage_error(capsys, command, value, expected):
    args = [command, str(CONFIGS / "dqn_cartpole.yaml"), "--device", value]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--device" in err and expected in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["schema", "validate", "evaluate", "--version"])
def test_output_that_cannot_be_written_ends_in_one_line(command: str, tmp_path: Path) -> None:
    """`agile ... > /dev/full` says it could not write (exit 1); `agile ... | head` stops quietly."""
    import gymnasium as gym

    from agile_offpolicy import DQN

    args = {"schema": ["schema"], "validate": ["validate", str(ROOT / "configs/training/dqn.yaml")],
            "evaluate": ["evaluate", str(tmp_path / "agent"), "--env", "CartPole-v1", "--episodes", "1"],
            "--version": ["--version"]}[command]
    if command == "evaluate":
        env = gym.make("CartPole-v1")
        DQN(env.observation_space, env.action_space).save_checkpoint(tmp_path / "agent")
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "agile_cli.main", *args], stdout=full, stderr=subprocess.PIPE,
                                text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "agile: cannot write the output: No space left on device"
    assert "Traceback" not in result.stderr
    reader = subprocess.Popen([sys.executable, "-m", "agile_cli.main", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.close()  # the reader is gone before anything is written
    err = reader.stderr.read().decode()
    assert reader.wait(timeout=120) in (0, 141) and "Traceback" not in err and "Exception ignored" not in err, err
