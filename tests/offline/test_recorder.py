"""Recording rollouts: random and agent policies, epsilon mixing, episode bookkeeping, truncation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from agile_offline.datasets import (
    TransitionData,
    check_spaces,
    load_dataset,
    load_minari,
    write_hdf5,
    write_minari,
)
from agile_offline.recorder import record

NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


def _assert_contiguous_episodes(data: TransitionData) -> None:
    """Inside every episode each next observation is the following row's observation."""
    inside = ~data.dones[:-1]
    obs, next_obs = np.asarray(data.observations), np.asarray(data.next_observations)
    np.testing.assert_array_equal(next_obs[:-1][inside], obs[1:][inside])
    assert data.dones[-1], "the table ends with a complete episode"


def test_random_episodes_are_whole_contiguous_and_seeded() -> None:
    data = record("CartPole-v1", None, episodes=5, seed=3, progress=False)
    lengths = data.episode_lengths()
    assert len(lengths) == 5 and sum(lengths) == len(data)
    assert data.episode_returns() == [float(n) for n in lengths]  # CartPole pays 1 per step
    assert data.terminations.sum() == 5 and not data.truncations.any()
    _assert_contiguous_episodes(data)
    starts = np.asarray(data.observations)[[0, *np.cumsum(lengths)[:-1]]]
    assert np.all(np.abs(starts) <= 0.05)  # every episode starts at a reset state
    assert set(np.unique(data.actions)) <= {0, 1} and data.actions.dtype.kind == "i"
    again = record("CartPole-v1", None, episodes=5, seed=3, progress=False)
    np.testing.assert_array_equal(again.actions, data.actions)
    np.testing.assert_array_equal(again.observations, data.observations)


def test_steps_round_up_to_whole_episodes() -> None:
    data = record("CartPole-v1", None, steps=60, seed=0, progress=False)
    assert len(data) >= 60 and len(data) - data.episode_lengths()[-1] < 60
    assert sum(data.episode_lengths()) == len(data)


def test_time_limit_is_a_truncation_not_a_termination() -> None:
    data = record("Pendulum-v1", None, episodes=2, seed=0, env_config={"max_episode_steps": 50}, progress=False)
    assert len(data) == 100 and np.asarray(data.actions).shape == (100, 1)
    assert np.flatnonzero(data.truncations).tolist() == [49, 99]
    assert not data.terminations.any()
    assert len(data.episode_returns()) == 2
    capped = record("CartPole-v1", None, episodes=20, seed=0, env_config={"max_episode_steps": 12}, progress=False)
    ends = np.flatnonzero(capped.dones)
    assert capped.truncations.any() and capped.terminations.any()
    assert all(length <= 12 for length in capped.episode_lengths())
    # stored exactly as the env reports: TimeLimit truncates at step 12 (a pole that also falls
    # at step 12 is terminated and truncated at once)
    assert all(capped.truncations[end] == (length == 12)
               for end, length in zip(ends, capped.episode_lengths(), strict=True))
    assert capped.terminations[ends][np.asarray(capped.episode_lengths()) < 12].all()


def test_vector_env_skips_autoreset_steps_and_keeps_episodes_together() -> None:
    env = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    try:
        data = record(env, None, episodes=7, seed=1, progress=False)
    finally:
        env.close()
    assert len(data.episode_returns()) == 7 and sum(data.episode_lengths()) == len(data)
    assert np.all(data.rewards == 1.0)  # no reward-0 reset transition was stored
    _assert_contiguous_episodes(data)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="exactly one of episodes or steps"):
        record("CartPole-v1", None, progress=False)
    with pytest.raises(ValueError, match="exactly one of episodes or steps"):
        record("CartPole-v1", None, episodes=1, steps=5, progress=False)
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        record("CartPole-v1", None, episodes=0, progress=False)
    with pytest.raises(ValueError, match=r"epsilon must be in \[0, 1\]"):
        record("CartPole-v1", None, episodes=1, epsilon=1.5, progress=False)
    with pytest.raises(gym.error.Error):
        record("NoSuchEnv-v0", None, episodes=1, progress=False)


def test_an_exception_in_the_rollout_propagates_and_closes_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[bool] = []
    original = gym.vector.SyncVectorEnv.close

    def close(self: gym.vector.SyncVectorEnv, **kwargs: Any) -> None:
        closed.append(True)
        original(self, **kwargs)

    def policy(obs: Any, info: dict[str, Any], start: np.ndarray) -> np.ndarray:
        raise KeyboardInterrupt

    monkeypatch.setattr(gym.vector.SyncVectorEnv, "close", close)
    with pytest.raises(KeyboardInterrupt):
        record("CartPole-v1", policy, episodes=2, progress=False)
    assert closed


# ------------------------------------------------------------------ agents
@pytest.fixture(scope="module")
def dqn_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agile_offpolicy.dqn import DQN

    env = gym.make("CartPole-v1")
    agent = DQN(env.observation_space, env.action_space, net_config=NET, seed=0)
    return agent.save_checkpoint(tmp_path_factory.mktemp("agents") / "dqn")


def test_agent_acts_greedily(dqn_checkpoint: Path) -> None:
    from agile_core.algorithms.base import EvolvableAlgorithm

    agent = EvolvableAlgorithm.load(dqn_checkpoint)
    data = record("CartPole-v1", agent, episodes=3, seed=0, progress=False)
    greedy = agent.get_action(np.asarray(data.observations), epsilon=0.0)
    np.testing.assert_array_equal(data.actions, greedy)
    assert len(data.episode_returns()) == 3
    _assert_contiguous_episodes(data)


def test_epsilon_mixes_in_random_actions(dqn_checkpoint: Path) -> None:
    from agile_core.algorithms.base import EvolvableAlgorithm

    agent = EvolvableAlgorithm.load(dqn_checkpoint)
    data = record("CartPole-v1", agent, steps=400, epsilon=0.5, seed=0, progress=False)
    greedy = agent.get_action(np.asarray(data.observations), epsilon=0.0)
    differs = float(np.mean(data.actions != greedy))
    assert 0.15 < differs < 0.35  # half the steps explore; half of those pick the other action
    again = record("CartPole-v1", agent, steps=400, epsilon=0.5, seed=0, progress=False)
    np.testing.assert_array_equal(again.actions, data.actions)


def test_agent_with_other_spaces_is_rejected(tmp_path: Path) -> None:
    from agile_offpolicy.dqn import DQN

    agent = DQN(spaces.Box(-1, 1, (3,)), spaces.Discrete(2), net_config=NET, seed=0)
    with pytest.raises(ValueError, match=r"acts in observation space Box\(3,\), the environment's is Box\(4,\)"):
        record("CartPole-v1", agent, episodes=1, progress=False)


def test_ppo_agent_takes_its_deterministic_action() -> None:
    from agile_onpolicy.ppo import PPO

    env = gym.make("Pendulum-v1", max_episode_steps=20)
    agent = PPO(env.observation_space, env.action_space, net_config=NET, seed=0)
    data = record(env, agent, episodes=2, seed=0, progress=False)
    env.close()
    out = agent.get_action(np.asarray(data.observations), deterministic=True)
    np.testing.assert_allclose(data.actions, agent.to_env_action(out[0]), atol=1e-5)
    assert np.flatnonzero(data.truncations).tolist() == [19, 39]


class _DictEnv(gym.Env[dict[str, np.ndarray], int]):
    """Dict observations (a position and a small image), 3 actions, terminates after 6 steps."""

    observation_space = spaces.Dict({"pos": spaces.Box(-10, 10, (2,), np.float32),
                                     "img": spaces.Box(0, 255, (4, 4, 3), np.uint8)})
    action_space = spaces.Discrete(3)

    def _obs(self) -> dict[str, np.ndarray]:
        return {"pos": np.array([self.t, -self.t], np.float32), "img": np.full((4, 4, 3), self.t * 10, np.uint8)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self._obs(), float(action), self.t >= 6, False, {}


def test_dict_observations_record_and_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = _DictEnv()
    data = record(env, None, episodes=3, seed=0, progress=False)
    assert isinstance(data.observations, dict) and data.observations["img"].shape == (18, 4, 4, 3)
    assert data.observations["img"].dtype == np.uint8
    assert data.episode_returns() == [float(data.actions[i:i + 6].sum()) for i in (0, 6, 12)]
    np.testing.assert_array_equal(data.next_observations["pos"][:, 0], np.tile(np.arange(1, 7), 3))  # type: ignore[index]
    check_spaces(data, env.observation_space, env.action_space, "recording")
    for loaded in (load_dataset(write_hdf5(data, tmp_path / "dict.h5")),
                   load_minari(write_minari(data, "toy/dict-v0", None, observation_space=env.observation_space,
                                            action_space=env.action_space).relative_to(tmp_path / "minari")
                               .as_posix())):
        for key in ("pos", "img"):
            np.testing.assert_array_equal(loaded.observations[key], data.observations[key])  # type: ignore[index]
            np.testing.assert_array_equal(loaded.next_observations[key], data.next_observations[key])  # type: ignore[index]


def test_discrete_observations() -> None:
    data = record("FrozenLake-v1", None, episodes=3, seed=0, progress=False)
    assert np.asarray(data.observations).shape == (len(data),)
    env = gym.make("FrozenLake-v1")
    check_spaces(data, env.observation_space, env.action_space, "lake")


def test_recurrent_agent_starts_every_episode_from_a_zero_state() -> None:
    from agile_onpolicy.ppo import PPO

    env = gym.make("CartPole-v1")
    agent = PPO(env.observation_space, env.action_space, recurrent=True, seed=0,
                net_config={"latent_dim": 16, "encoder_config": {"arch": "lstm", "hidden_state_size": 16}})
    data = record(env, agent, episodes=3, seed=0, progress=False)
    env.close()
    start, length = data.episode_bounds()[1][0], data.episode_lengths()[1]
    hidden, actions = None, []
    for row in range(start, start + length):  # replay the second episode alone, from a zero state
        out = agent.get_action(np.asarray(data.observations)[row][None], hidden_state=hidden, deterministic=True)
        hidden = out[4]
        actions.append(int(agent.to_env_action(out[0])[0]))
    assert actions == data.actions[start:start + length].tolist()
