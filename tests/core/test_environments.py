"""Vector environments from manifest specs: ids, entrypoints, files, wrappers, sync and subprocess."""

from pathlib import Path

import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

from agile_core.environments import EnvironmentAPIError, EnvironmentBuildError, make_vector_env
from agile_core.specs.env import GymEnvSpec

HERE = Path(__file__).parent


def test_registered_id_uses_the_native_vector_implementation():
    env = make_vector_env(GymEnvSpec(name="CartPole-v1", num_envs=4), seed=0)
    assert not isinstance(env, SyncVectorEnv | AsyncVectorEnv)  # CartPole's own batched implementation
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 4)
    env.close()


def test_wrappers_and_config_force_sync_sub_envs():
    spec = GymEnvSpec(name="CartPole-v1", num_envs=2, config={"max_episode_steps": 7},
                      wrappers=[{"name": "gymnasium.wrappers.RecordEpisodeStatistics"}])
    env = make_vector_env(spec)
    assert isinstance(env, SyncVectorEnv)
    env.reset(seed=0)
    ended_at = None
    for step in range(1, 8):
        _, _, terminated, truncated, _ = env.step(np.zeros(2, dtype=np.int64))
        if (terminated | truncated).any():
            ended_at = step
            break
    assert ended_at is not None and ended_at <= 7  # the config's episode limit took effect
    env.close()


@pytest.mark.parametrize("sync", [True, False])
def test_custom_env_by_path(sync):
    spec = GymEnvSpec(name="Counter", path="envs_fixture/counter_env.py", config={"length": 3}, num_envs=2, sync=sync)
    env = make_vector_env(spec, base_dir=HERE)
    assert isinstance(env, SyncVectorEnv if sync else AsyncVectorEnv)
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, _, terminated, _, _ = env.step(np.zeros(2, dtype=np.int64))
    assert terminated.all() and obs[0, 0] == 3
    env.close()


@pytest.mark.parametrize("sync", [True, False])
def test_custom_env_by_entrypoint(sync, monkeypatch):
    root = str(HERE.parents[1])  # the entrypoint module must be importable in spawned children too
    monkeypatch.syspath_prepend(root)
    monkeypatch.setenv("PYTHONPATH", root)
    spec = GymEnvSpec(name="Counter", entrypoint="tests.core.envs_fixture.counter_env:CounterEnv", num_envs=2, sync=sync)
    env = make_vector_env(spec, base_dir=HERE)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 1)
    env.close()


def test_api_violation_names_env_call_and_shapes():
    spec = GymEnvSpec(name="Broken", path="envs_fixture/broken_env.py", num_envs=2)
    with pytest.raises(EnvironmentAPIError, match=r"Broken: step\(\) returned observation with shape \(4,\); the observation space expects \(3,\)"):
        make_vector_env(spec, base_dir=HERE)


def test_missing_entrypoint_attribute_is_reported():
    with pytest.raises(EnvironmentBuildError, match="has no attribute 'Nope'"):
        make_vector_env(GymEnvSpec(name="x", entrypoint="tests.core.envs_fixture.counter_env:Nope"))
    with pytest.raises(EnvironmentBuildError, match="cannot make 'NoSuchEnv-v9'"):
        make_vector_env(GymEnvSpec(name="NoSuchEnv-v9", num_envs=1))


def test_population_env_is_seeded_from_the_given_env() -> None:
    """A seeded vector env widened for a population gives the same episodes on every run."""
    import gymnasium as gym
    from gymnasium.vector import SyncVectorEnv

    from agile_core.training.envs import population_vector_env

    def first_observations(native: bool) -> np.ndarray:
        if native:
            env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="vector_entry_point")
        else:
            env = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
        env.reset(seed=7)
        widened = population_vector_env(env, 3)
        assert widened is not None and widened.num_envs == 6
        obs, _ = widened.reset()
        return obs

    for native in (True, False):
        np.testing.assert_array_equal(first_observations(native), first_observations(native))
