"""Members whose weights stop being finite rank last (their fitness becomes NaN, with a warning
once), and a run whose members have all diverged fails instead of ending with exit 0."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from agile_cli.main import main
from agile_core.errors import RunWarning
from agile_core.training.divergence import DivergenceWatch, TrainingDiverged, has_finite_weights
from agile_offpolicy import DQN

ROOT = Path(__file__).resolve().parents[2]


def population(size: int) -> list[DQN]:
    env = gym.make("CartPole-v1")
    agents = [DQN(env.observation_space, env.action_space, index=i) for i in range(size)]
    for agent in agents:
        agent.fitness.append(10.0)
    return agents


def poison(agent: DQN) -> None:
    with torch.no_grad():
        next(agent.actor.parameters()).view(-1)[0] = math.nan


def test_a_diverged_member_gets_a_nan_fitness_and_one_warning() -> None:
    agents = population(3)
    poison(agents[1])
    assert has_finite_weights(agents[0]) and not has_finite_weights(agents[1])
    watch = DivergenceWatch()
    with pytest.warns(RunWarning, match=r"member 1 \(lr=0\.0001\): its weights became NaN or infinite by step 64"):
        marked = watch.check(agents, [10.0, 12.0, 11.0], step=64)
    assert marked[0] == 10.0 and math.isnan(marked[1]) and marked[2] == 11.0
    assert math.isnan(agents[1].fitness[-1])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        watch.check(agents, [10.0, 12.0, 11.0], step=128)
    assert not seen  # warned once per member


def test_a_population_that_diverged_entirely_stops() -> None:
    agents = population(2)
    for agent in agents:
        poison(agent)
    with pytest.raises(TrainingDiverged, match="every member's weights became NaN or infinite by step 64"):
        DivergenceWatch().check(agents, [1.0, 2.0], step=64)


def test_agile_train_with_a_huge_learning_rate_exits_1_naming_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", str(ROOT / "configs/training/dqn_cartpole.yaml"), "--quiet", "--run-dir",
                 str(tmp_path / "run"), "--set", "training.evo_steps=128", "--set", "training.learning_delay=32",
                 "--set", "training.max_steps=512", "--set", "training.pop_size=2", "--set", "algorithm.lr=1e300",
                 "--set", "mutation.rl_hp_selection.lr.max=1e301", "--set", "training.eval_steps=20"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "TrainingDiverged: every member's weights became NaN or infinite" in err and "lr=1e+300" in err
