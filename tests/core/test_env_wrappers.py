"""agile_core.environments.wrappers: ObservationIndices, directly and from a manifest spec."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from agile_core.environments import make_vector_env
from agile_core.environments.wrappers import ObservationIndices
from agile_core.specs.env import GymEnvSpec


def test_keeps_the_given_entries_with_their_bounds():
    base = gym.make("CartPole-v1")
    env = ObservationIndices(gym.make("CartPole-v1"), indices=[0, 2])
    assert isinstance(env.observation_space, spaces.Box)
    assert env.observation_space.shape == (2,)
    assert env.observation_space.dtype == base.observation_space.dtype
    np.testing.assert_array_equal(env.observation_space.low, base.observation_space.low[[0, 2]])
    np.testing.assert_array_equal(env.observation_space.high, base.observation_space.high[[0, 2]])
    full, _ = base.reset(seed=3)
    obs, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs, full[[0, 2]])
    full, *_ = base.step(1)
    obs, *_ = env.step(1)
    np.testing.assert_array_equal(obs, full[[0, 2]])
    assert env.observation_space.contains(obs)


def test_order_and_negative_indices():
    env = ObservationIndices(gym.make("CartPole-v1"), indices=[-1, 0])
    full, _ = gym.make("CartPole-v1").reset(seed=1)
    obs, _ = env.reset(seed=1)
    np.testing.assert_array_equal(obs, full[[3, 0]])


@pytest.mark.parametrize("indices", [[], [4], [-5], [0, 0], [1, -3]])
def test_rejects_bad_indices(indices):
    with pytest.raises(ValueError):
        ObservationIndices(gym.make("CartPole-v1"), indices=indices)


def test_rejects_non_box_spaces():
    with pytest.raises(TypeError):
        ObservationIndices(gym.make("FrozenLake-v1"), indices=[0])


def test_named_from_a_manifest_environment_section():
    spec = GymEnvSpec(name="CartPole-v1", num_envs=3, wrappers=[
        {"name": "agile_core.environments.wrappers:ObservationIndices", "kwargs": {"indices": [0, 2]}}])
    env = make_vector_env(spec, seed=0)
    assert env.single_observation_space.shape == (2,)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 2)
    obs, *_ = env.step(np.ones(3, dtype=np.int64))
    assert obs.shape == (3, 2)
    env.close()
