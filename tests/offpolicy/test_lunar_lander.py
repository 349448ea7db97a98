"""LunarLander (Box2D) is in the default install: `agile train` runs the trainer guide's DQN
manifest (configs/training/dqn.yaml) on it for a few thousand steps per agent, in CI."""

import json
from pathlib import Path

from agile_cli.main import main

ROOT = Path(__file__).resolve().parents[2]
DQN = ROOT / "configs" / "training" / "dqn.yaml"
SMOKE = ["--set", "training.max_steps=4096", "--set", "training.evo_steps=2048", "--set", "training.pop_size=2",
         "--set", "training.eval_loop=1", "--set", "training.eval_steps=500", "--set", "environment.num_envs=8",
         "--set", "replay_buffer.max_size=20000", "--quiet"]


def test_dqn_trains_on_lunar_lander_through_agile_train(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["train", str(DQN), *SMOKE, "--run-dir", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["agents"]) == 2
    assert all(agent["steps"] >= 4096 for agent in summary["agents"])
    resolved = json.loads((run_dir / "manifest.resolved.json").read_text())
    assert resolved["environment"]["name"] == "LunarLander-v3"
    history = (run_dir / "metrics.history.jsonl").read_text().splitlines()
    assert len(history) == 2  # two generations, each evaluated
