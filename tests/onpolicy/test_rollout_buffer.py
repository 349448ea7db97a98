"""Storage, add() contract and flat minibatches of the on-policy rollout buffer."""

from __future__ import annotations

from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_onpolicy.rollout import RolloutBatch, RolloutBuffer

T, N = 8, 3
DICT_OBS = spaces.Dict(
    {
        "image": spaces.Box(0, 255, (4, 5), dtype=np.uint8),
        "vector": spaces.Box(-1.0, 1.0, (3,), dtype=np.float64),
        "pos": spaces.Discrete(7),
        "nested": spaces.Tuple((spaces.MultiBinary(2), spaces.MultiDiscrete([3, 4]))),
    }
)
# valid pattern: env 0 ends an episode at step 2 (row 3 autoreset), env 2 at step 5 (row 6)
VALID = np.ones((T, N), dtype=bool)
VALID[3, 0] = VALID[6, 2] = False
TERM = np.zeros((T, N), dtype=bool)
TERM[2, 0] = True
TRUNC = np.zeros((T, N), dtype=bool)
TRUNC[5, 2] = True


def _fill(
    action_space: spaces.Space[Any], obs_space: spaces.Space[Any] = DICT_OBS
) -> RolloutBuffer:
    buf = RolloutBuffer(T, N, obs_space, action_space, gamma=0.9, gae_lambda=0.95)
    obs_space.seed(0)
    action_space.seed(1)
    for t in range(T):
        obs = _stack([obs_space.sample() for _ in range(N)])
        act = _stack([action_space.sample() for _ in range(N)])
        buf.add(
            obs,
            act,
            np.full(N, float(t)),
            TERM[t],
            TRUNC[t],
            np.arange(N) + 10.0 * t,
            torch.full((N, 1), -float(t)),
            VALID[t],
            final_value=np.zeros(N),
        )
    buf.compute_returns_and_advantages(np.zeros(N))
    return buf


def _stack(items: list[Any]) -> Any:
    first = items[0]
    if isinstance(first, dict):
        return {k: _stack([it[k] for it in items]) for k in first}
    if isinstance(first, tuple):
        return tuple(_stack([it[i] for it in items]) for i in range(len(first)))
    return np.stack([np.asarray(it) for it in items])


def _epoch(buf: RolloutBuffer, batch_size: int, seed: int = 0, **kw: Any) -> list[RolloutBatch]:
    return list(buf.minibatches(batch_size, np.random.default_rng(seed), **kw))


def test_dict_observation_storage_shapes_and_dtypes() -> None:
    buf = _fill(spaces.Discrete(4))
    obs = buf.observations
    assert isinstance(obs, dict)
    assert obs["image"].shape == (T, N, 4, 5) and obs["image"].dtype == torch.uint8
    assert obs["vector"].shape == (T, N, 3) and obs["vector"].dtype == torch.float32
    assert obs["pos"].shape == (T, N) and obs["pos"].dtype == torch.int64
    binary, multi = obs["nested"]
    assert binary.shape == (T, N, 2) and binary.dtype == torch.float32
    assert multi.shape == (T, N, 2) and multi.dtype == torch.int64
    assert buf.size == T and buf.full and buf.num_valid == T * N - 2


@pytest.mark.parametrize(
    ("action_space", "shape", "dtype"),
    [
        (spaces.Discrete(4), (), torch.int64),
        (spaces.Box(-2.0, 2.0, (2,), dtype=np.float32), (2,), torch.float32),
        (spaces.MultiDiscrete([2, 3, 4]), (3,), torch.int64),
        (spaces.MultiBinary(5), (5,), torch.float32),
    ],
)
def test_minibatch_shapes_per_action_space(
    action_space: spaces.Space[Any], shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    buf = _fill(action_space)
    batches = _epoch(buf, batch_size=5)
    assert [len(b.indices) for b in batches] == [5, 5, 5, 5, 2]  # 22 valid rows
    batch = batches[0]
    assert batch.actions.shape == (5, *shape) and batch.actions.dtype == dtype
    assert batch.obs["image"].shape == (5, 4, 5)
    assert batch.obs["vector"].shape == (5, 3)
    assert batch.obs["pos"].shape == (5,)
    assert batch.obs["nested"][1].shape == (5, 2)
    for field in (batch.old_log_probs, batch.old_values, batch.advantages, batch.returns):
        assert field.shape == (5,) and field.dtype == torch.float32


def test_each_valid_row_once_per_epoch_and_invalid_never() -> None:
    buf = _fill(spaces.Discrete(4))
    valid_flat = set(np.flatnonzero(VALID.reshape(-1)).tolist())
    for seed in range(3):
        seen = Counter(i for b in _epoch(buf, 4, seed) for i in b.indices.tolist())
        assert set(seen) == valid_flat
        assert all(count == 1 for count in seen.values())
    assert 3 * N + 0 not in valid_flat and 6 * N + 2 not in valid_flat


def test_minibatch_rows_match_storage() -> None:
    buf = _fill(spaces.MultiDiscrete([2, 3, 4]))
    for batch in _epoch(buf, 7):
        steps, envs = batch.indices // N, batch.indices % N
        assert torch.equal(batch.obs["image"], buf.observations["image"][steps, envs])
        assert torch.equal(batch.actions, buf.actions[steps, envs])
        assert torch.equal(batch.old_log_probs, -steps.float())
        assert torch.equal(batch.old_values, envs.float() + 10.0 * steps.float())
        assert torch.equal(batch.advantages, buf.advantages[steps, envs])
        assert torch.equal(batch.returns, buf.returns[steps, envs])


def test_shuffling_is_seeded_and_drop_last() -> None:
    buf = _fill(spaces.Discrete(4))
    first = [b.indices.tolist() for b in _epoch(buf, 4, seed=7)]
    again = [b.indices.tolist() for b in _epoch(buf, 4, seed=7)]
    other = [b.indices.tolist() for b in _epoch(buf, 4, seed=8)]
    assert first == again and first != other
    assert [len(b.indices) for b in _epoch(buf, 4, drop_last=True)] == [4] * 5


def test_add_accepts_tensors_numpy_and_trailing_unit_dims() -> None:
    buf = RolloutBuffer(2, 2, spaces.Box(-1, 1, (3,)), spaces.Discrete(3))
    row = buf.add(
        torch.ones(2, 3, dtype=torch.float64),
        np.array([[1], [2]]),
        torch.tensor([1.0, 2.0]),
        np.array([False, True]),
        [False, False],
        torch.tensor([[0.5], [0.25]], requires_grad=True),
        np.zeros((2, 1)),
        torch.tensor([True, True]),
    )
    assert row == 0 and buf.size == 1 and not buf.full
    assert buf.actions.tolist()[0] == [1, 2]
    assert buf.values[0].tolist() == [0.5, 0.25] and not buf.values.requires_grad
    assert buf.terminations[0].tolist() == [False, True]
    with pytest.raises(ValueError, match="obs"):
        buf.add(np.ones((2, 4)), [0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="reward"):
        buf.add(np.ones((2, 3)), [0, 0], [0, 0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [1, 1])


def test_full_reset_and_errors() -> None:
    buf = RolloutBuffer(1, 1, spaces.Discrete(2), spaces.Discrete(2))
    with pytest.raises(RuntimeError, match="empty"):
        buf.compute_returns_and_advantages([0.0])
    buf.add([0], [0], [1.0], [False], [False], [0.0], [0.0], [True])
    with pytest.raises(RuntimeError, match="compute_returns_and_advantages"):
        next(buf.minibatches(1, np.random.default_rng(0)))
    with pytest.raises(RuntimeError, match="full"):
        buf.add([0], [0], [1.0], [False], [False], [0.0], [0.0], [True])
    with pytest.raises(IndexError):
        buf.set_truncation_values(1, [True], [0.0])
    with pytest.raises(RuntimeError, match="recurrent"):
        next(buf.recurrent_minibatches(1, 1, np.random.default_rng(0)))
    buf.compute_returns_and_advantages([2.0])
    assert buf.advantages.item() == pytest.approx(1.0 + 0.99 * 2.0)
    buf.reset()
    assert buf.size == 0 and not buf.full and buf.num_valid == 0
    assert buf.advantages.item() == 0.0
    with pytest.raises(RuntimeError, match="compute_returns_and_advantages"):
        next(buf.minibatches(1, np.random.default_rng(0)))


def test_partial_buffer_uses_only_stored_rows() -> None:
    buf = RolloutBuffer(5, 2, spaces.Discrete(2), spaces.Discrete(2), gamma=0.5, gae_lambda=1.0)
    for _ in range(2):
        buf.add(
            [0, 1],
            [0, 1],
            [1.0, 1.0],
            [False, False],
            [False, False],
            [0.0, 0.0],
            [0.0, 0.0],
            [True, True],
        )
    buf.compute_returns_and_advantages([0.0, 0.0])
    assert buf.returns[:2, 0].tolist() == [1.5, 1.0] and bool((buf.returns[2:] == 0).all())
    assert sorted(i for b in _epoch(buf, 3) for i in b.indices.tolist()) == [0, 1, 2, 3]


class _SumValue:
    """A fixed 'critic' for the integration test: V(obs) = sum(obs) per env."""

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return obs.astype(np.float64).sum(axis=-1)


def test_gymnasium_next_step_autoreset_loop() -> None:
    """The documented training loop, on a real vector env with terminations and truncations."""
    num_envs, num_steps = 4, 64
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=14) for _ in range(num_envs)]
    )
    envs.action_space.seed(0)
    critic = _SumValue()
    buffers = [
        RolloutBuffer(
            num_steps,
            num_envs,
            envs.single_observation_space,
            envs.single_action_space,
            gamma=0.9,
            gae_lambda=0.9,
        )
        for _ in range(2)
    ]
    obs, _ = envs.reset(seed=3)
    autoreset = np.zeros(num_envs, dtype=bool)
    saw_term = saw_trunc = False
    for _ in range(num_steps):
        action = envs.action_space.sample()
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        valid = ~autoreset
        assert not (terminated | truncated)[~valid].any() and (reward[~valid] == 0).all()
        saw_term |= bool((terminated & valid).any())
        saw_trunc |= bool((truncated & ~terminated & valid).any())
        value = critic(obs)
        # explicit bootstrap in buffers[0]; buffers[1] reuses the autoreset row's value
        buffers[0].add(
            obs,
            action,
            reward,
            terminated,
            truncated,
            value,
            np.zeros(num_envs),
            valid,
            final_value=critic(next_obs),
        )
        buffers[1].add(obs, action, reward, terminated, truncated, value, np.zeros(num_envs), valid)
        autoreset = terminated | truncated
        obs = next_obs
    envs.close()
    assert saw_term and saw_trunc
    buffers[0].compute_returns_and_advantages(critic(obs), last_done=autoreset)
    buffers[1].compute_returns_and_advantages(
        critic(obs), last_done=autoreset, truncation_bootstrap="autoreset_row"
    )
    torch.testing.assert_close(buffers[0].advantages, buffers[1].advantages)
    # rows after a finished episode are exactly the invalid ones
    done = (buffers[0].terminations | buffers[0].truncations).numpy()
    assert np.array_equal(~buffers[0].valid.numpy()[1:], done[:-1])
    assert bool((buffers[0].advantages[~buffers[0].valid] == 0).all())
