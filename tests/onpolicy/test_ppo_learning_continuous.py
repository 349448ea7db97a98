"""PPO with a Gaussian policy learns Pendulum-v1 (a short CI variant of the benchmark): the example
manifest's evolving population of 4, cut to two generations (41k steps per agent).

One agent alone was not robust enough for a test that must pass for any seed: with the same
settings and 61k steps, seed 4 ended at -1,575 (worse than untrained, about -1,200 to -1,600),
while the population reached -400 within 41k steps per agent with each of seeds 0-4
(benchmarks/learning.py) and this test's best was -194, -351, -182, -158 and -157 (docs/learning.md)."""

from pathlib import Path

import pytest
import torch

from tests.seeds import best_of_seeded_run, learning_seed

torch.set_num_threads(1)
MANIFEST = Path(__file__).resolve().parents[2] / "configs" / "training" / "ppo_pendulum.yaml"


@pytest.mark.learning
def test_ppo_population_learns_pendulum():
    """Some member evaluates (8 greedy episodes) at better than -800 within 41k steps per agent."""
    best = best_of_seeded_run(MANIFEST, learning_seed(), "training.max_steps=40960")
    print(f"Pendulum PPO population: best evaluation {best:.1f}")
    assert best > -800, best
