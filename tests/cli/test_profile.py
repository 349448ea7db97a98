"""`agile train --profile`, with the population batched and agent by agent."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DQN = ROOT / "configs" / "training" / "dqn_cartpole.yaml"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SECTIONS = {"env", "act", "sample", "learn", "evaluate", "evolve", "checkpoint", "log", "setup", "other", "total"}


@pytest.mark.parametrize("batched", ["true", "false"])
def test_profile_writes_where_the_time_went(tmp_path: Path, batched: str) -> None:
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "agile_cli.main", "train", str(DQN), "--profile", "--quiet", "--run-dir", str(run_dir),
         "--set", "training.max_steps=4000", "--set", "training.evo_steps=2000", "--set", "training.pop_size=2",
         "--set", "training.learning_delay=200", "--set", f"training.batch_population={batched}"],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "where the time went" in result.stdout and "learn" in result.stdout
    profile = json.loads((run_dir / "profile.json").read_text())
    assert set(profile) == SECTIONS
    assert profile["total"]["seconds"] > 0
    assert sum(profile[name]["share"] for name in SECTIONS - {"total"}) == pytest.approx(1.0, abs=0.01)
    for name in ("env", "act", "learn", "evaluate", "setup"):
        assert profile[name]["seconds"] > 0 and profile[name]["calls"] > 0, name
    assert profile["setup"]["calls"] == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert all(agent["steps"] == 4000 for agent in summary["agents"])
    assert all(agent["learn_steps"] > 0 for agent in summary["agents"])
