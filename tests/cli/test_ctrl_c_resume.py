"""Ctrl-C, then resume: a seeded run stopped by one Ctrl-C and resumed from its checkpoint writes
the same history and summary as the same run left alone, wherever the Ctrl-C lands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_seeded_repeat import CONFIGS, ROOT, _without_timings

RUN = ["--set", "training.max_steps=1024", "--set", "training.evo_steps=256", "--set", "training.pop_size=3",
       "--set", "training.eval_steps=100", "--set", "training.eval_loop=1", "--set", "training.seed=11",
       "--set", "training.learning_delay=64", "--quiet"]


def _command(run_dir: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "agile_cli.main", "train", str(CONFIGS / "dqn_cartpole.yaml"), *RUN, *extra,
            "--run-dir", str(run_dir)]


def _results(run_dir: Path) -> tuple[list, dict]:
    history = [json.loads(line) for line in (run_dir / "metrics.history.jsonl").read_text().splitlines()]
    return _without_timings(history), _without_timings(json.loads((run_dir / "summary.json").read_text()))


def _interrupted_then_resumed(run_dir: Path, extra: list[str], after_generations: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(_command(run_dir, extra), env=env, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    history = run_dir / "metrics.history.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if history.exists() and len(history.read_text().splitlines()) >= after_generations:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert "exact checkpoint" in stderr
    resumed = subprocess.run([*_command(run_dir, extra), "--resume-from-checkpoint", str(run_dir)],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("extra", [["--set", "training.batch_population=false"], []],
                         ids=["agent-by-agent", "population-batched"])
def test_a_ctrl_c_resume_equals_the_uninterrupted_run(extra: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    whole = subprocess.run(_command(tmp_path / "whole", extra), capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=600)
    assert whole.returncode == 0, whole.stderr
    _interrupted_then_resumed(tmp_path / "cut", extra, after_generations=2)
    assert _results(tmp_path / "cut") == _results(tmp_path / "whole")
