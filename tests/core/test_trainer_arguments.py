"""The Python API refuses wrong argument types at once, naming the argument, instead of failing
later deep inside a run; a plain Gymnasium env object is accepted and wrapped."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from agile_core.specs.training import TrainingSpec
from agile_core.trainer import LocalTrainer
from agile_offpolicy.specs import DQNSpec

TINY = TrainingSpec(max_steps=64, evo_steps=64, pop_size=1, learning_delay=16, eval_steps=10, eval_loop=1)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"algorithm": None}, TypeError, "algorithm must be an algorithm name such as 'DQN' or an AlgorithmSpec, got None"),
    ({"algorithm": DQNSpec}, TypeError, "algorithm: pass an instance, DQNSpec(...), not the class itself"),
    ({"environment": 42}, TypeError, "environment must be an environment id such as 'CartPole-v1'"),
    ({"device": 5}, TypeError, "device must be a torch device name such as 'cpu' or 'cuda:0', got 5"),
    ({"device": "bogus"}, ValueError, "unknown torch device 'bogus'"),
    ({"hpo": "no"}, TypeError, "hpo must be True or False, got 'no'"),
    ({"resume_from_checkpoint": "run\0dir"}, ValueError, "resume_from_checkpoint must be a non-empty path without NUL"),
    ({"load_weights_from": 3}, TypeError, "load_weights_from must be a path, got 3"),
], ids=["algorithm-none", "spec-class", "env-int", "device-int", "device-bogus", "hpo-string", "nul-path", "int-path"])
def test_wrong_constructor_arguments_are_refused_naming_them(kwargs: dict[str, Any], error: type[Exception],
                                                             message: str) -> None:
    arguments: dict[str, Any] = {"algorithm": "DQN", "environment": "CartPole-v1", "training": TINY, **kwargs}
    with pytest.raises(error) as caught:
        LocalTrainer(**arguments)
    assert message in str(caught.value)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"checkpoint_steps": -5}, "checkpoint_steps must be an integer >= 1, got -5"),
    ({"threads": 0}, "threads must be an integer >= 1, got 0"),
])
def test_wrong_train_arguments_are_refused_before_anything_runs(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LocalTrainer("DQN", "CartPole-v1", TINY).train(verbose=False, **kwargs)


def test_a_single_gymnasium_env_object_trains_as_a_one_sub_env_vector_env() -> None:
    population, fitnesses = LocalTrainer("DQN", gym.make("CartPole-v1"), TINY).train(verbose=False)
    assert len(population) == 1 and len(fitnesses) == 1 and population[0].steps >= 64
