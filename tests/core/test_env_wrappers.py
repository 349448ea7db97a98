"""agile_core.environments.wrappers: ObservationIndices, directly and from a manifest spec."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv

from agile_core.environments import make_vector_env
from agile_core.environments.wrappers import ObservationIndices, VectorObservationIndices
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
    # CartPole keeps its native vector implementation: the wrapper has a vector form
    assert isinstance(env, VectorObservationIndices) and not isinstance(env.env, SyncVectorEnv)
    assert env.single_observation_space.shape == (2,)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 2)
    obs, *_ = env.step(np.ones(3, dtype=np.int64))
    assert obs.shape == (3, 2)
    env.close()


def test_vector_form_matches_the_wrapper_on_each_sub_env():
    native = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point")
    full = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point")
    env = ObservationIndices.vectorized(native, indices=[-1, 0])
    single = ObservationIndices(gym.make("CartPole-v1"), indices=[-1, 0]).observation_space
    assert env.single_observation_space == single
    assert env.observation_space.shape == (4, 2)
    obs, _ = env.reset(seed=5)
    expected, _ = full.reset(seed=5)
    np.testing.assert_array_equal(obs, expected[:, [3, 0]])
    actions = np.array([0, 1, 1, 0])
    for _ in range(30):  # through autoresets
        obs, *_ = env.step(actions)
        expected, *_ = full.step(actions)
        np.testing.assert_array_equal(obs, expected[:, [3, 0]])
        assert env.observation_space.contains(obs)


def test_vector_form_rejects_what_the_wrapper_rejects():
    with pytest.raises(ValueError):
        VectorObservationIndices(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="vector_entry_point"), [4])


def test_a_wrapper_without_a_vector_form_falls_back_to_sub_envs():
    spec = GymEnvSpec(name="CartPole-v1", num_envs=2, wrappers=[
        {"name": "agile_core.environments.wrappers:ObservationIndices", "kwargs": {"indices": [0, 2]}},
        {"name": "gymnasium.wrappers.RecordEpisodeStatistics"}])
    env = make_vector_env(spec, seed=0)
    assert isinstance(env, SyncVectorEnv)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 2)
    env.close()


def test_a_vector_wrapped_native_env_widens_for_a_population():
    from agile_core.training.envs import population_vector_env

    spec = GymEnvSpec(name="CartPole-v1", num_envs=2, wrappers=[
        {"name": "agile_core.environments.wrappers:ObservationIndices", "kwargs": {"indices": [2]}}])

    def first_observations() -> np.ndarray:
        env = make_vector_env(spec, seed=0)
        env.reset(seed=7)
        widened = population_vector_env(env, 3)
        assert isinstance(widened, VectorObservationIndices) and widened.num_envs == 6
        assert widened.single_observation_space.shape == (1,)
        obs, _ = widened.reset()
        assert obs.shape == (6, 1)
        return obs

    np.testing.assert_array_equal(first_observations(), first_observations())  # seeded from the given env


def test_a_wrapper_around_a_widenable_env_is_not_widened_without_it():
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    from agile_core.training.envs import population_vector_env

    spec = GymEnvSpec(name="CartPole-v1", num_envs=2, wrappers=[
        {"name": "agile_core.environments.wrappers:ObservationIndices", "kwargs": {"indices": [2]}}])
    assert population_vector_env(RecordEpisodeStatistics(make_vector_env(spec, seed=0)), 3) is None
