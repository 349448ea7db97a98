"""A seeded manifest trained twice, in two processes, writes the same history and summary
(timings aside): every generator (envs, networks, exploration, mutation, selection) follows
`training.seed`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "training"
TIMINGS = {"time", "wall_time_s", "steps_per_second"}
TINY = ["--set", "training.max_steps=768", "--set", "training.evo_steps=256", "--set", "training.pop_size=3",
        "--set", "training.eval_steps=100", "--set", "training.eval_loop=1", "--quiet"]


def _without_timings(value):
    if isinstance(value, dict):
        return {key: _without_timings(item) for key, item in value.items() if key not in TIMINGS}
    if isinstance(value, list):
        return [_without_timings(item) for item in value]
    return value


def _train(manifest: Path, run_dir: Path, extra: list[str]) -> tuple[list, dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "agile_cli.main", "train", str(manifest), *TINY, *extra,
                             "--run-dir", str(run_dir)], capture_output=True, text=True, env=env, cwd=ROOT,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    history = [json.loads(line) for line in (run_dir / "metrics.history.jsonl").read_text().splitlines()]
    return _without_timings(history), _without_timings(json.loads((run_dir / "summary.json").read_text()))


@pytest.mark.parametrize(("manifest", "extra"), [
    ("dqn_cartpole.yaml", ["--set", "training.learning_delay=64"]),
    ("ppo_cartpole.yaml", ["--set", "algorithm.learn_step=128", "--set", "mutation.rand_seed=null"]),
], ids=["dqn", "ppo-seeded-by-training-seed"])
def test_two_seeded_runs_write_the_same_history(manifest: str, extra: list[str], tmp_path: Path) -> None:
    first = _train(CONFIGS / manifest, tmp_path / "a", ["--set", "training.seed=7", *extra])
    second = _train(CONFIGS / manifest, tmp_path / "b", ["--set", "training.seed=7", *extra])
    assert first == second
