"""End to end through the CLI: train the shipped DQN CartPole manifest to its target, evaluate
the saved elite, plot the run. Several minutes on 2 CPU cores.

The manifest is not tuned to its seed: benchmarks/learning.py reached its target (every agent
>= 480 at one evaluation) with each of seeds 0-4, after 30k-45k steps per agent
(docs/learning.md)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.seeds import learning_seed

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "configs" / "training" / "dqn_cartpole.yaml"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def agile(*args: str, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agile_cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


@pytest.mark.learning
def test_train_evaluate_plot_dqn_cartpole(tmp_path):
    run_dir = tmp_path / "run"
    started = time.monotonic()
    seed = learning_seed()
    trained = agile("train", str(MANIFEST), "--save-elite", "--quiet", "--run-dir", str(run_dir),
                    "--set", f"training.seed={seed}", "--set", f"mutation.rand_seed={seed}", timeout=1800)
    train_wall = time.monotonic() - started
    assert trained.returncode == 0, trained.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    target = json.loads((run_dir / "manifest.resolved.json").read_text())["training"]["target_score"]
    generations = [json.loads(line) for line in (run_dir / "metrics.history.jsonl").read_text().splitlines()]
    print(f"\ntrain: {train_wall:.0f} s wall, {summary['total_steps']} population steps "
          f"({summary['total_steps'] // len(summary['agents'])} per agent), {len(generations)} generations, "
          f"target {target} reached: {summary['target_reached']} at step {summary['target_reached_at_step']}, "
          f"final fitness {[round(a['fitness'], 1) for a in summary['agents']]}")
    assert summary["target_reached"], f"final fitness {[a['fitness'] for a in summary['agents']]} < {target}"
    assert summary["target_reached_at_step"] == summary["total_steps"]
    assert all(agent["fitness"] >= target for agent in generations[-1]["agents"])

    evaluated = agile("evaluate", str(run_dir / "elite"), "--env", "CartPole-v1", "--episodes", "10", "--json",
                      timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout)
    print(f"evaluate: mean return {report['mean_return']:.1f} ± {report['std_return']:.1f} over 10 episodes")
    assert report["mean_return"] >= 475

    plotted = agile("plot", str(run_dir), timeout=300)
    assert plotted.returncode == 0, plotted.stderr
    for name in ("fitness.png", "hyperparameters.png", "lineage.png"):
        path = run_dir / "plots" / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE and path.stat().st_size > 10_000
        print(f"plot: {path}")
