"""Uniform 1-step experience replay."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from .batch import ReplayBatch
from .ring import RingBuffer
from .spaces import LeafSpec, Nested, Spec, as_rows, select_rows, space_spec, to_numpy

__all__ = ["ReplayBuffer", "row_selection"]

REWARD_SPEC = LeafSpec((), np.dtype(np.float32))
DONE_SPEC = LeafSpec((), np.dtype(np.float32))


def row_selection(mask: Any, n: int) -> np.ndarray | None:
    """Return the row indices selected by boolean ``mask`` over ``n`` rows, or ``None`` for all."""
    if mask is None:
        return None
    keep = to_numpy(mask).astype(bool, copy=False).reshape(-1)
    if keep.shape[0] != n:
        raise ValueError(f"mask has {keep.shape[0]} entries for {n} rows")
    return None if keep.all() else np.flatnonzero(keep)


class ReplayBuffer(RingBuffer):
    """Uniform replay of 1-step transitions in preallocated contiguous numpy storage.

    Observations are stored per leaf of the observation space with the space's
    dtype (``float_dtype`` optionally recasts floating Box leaves, e.g. float64 to
    float32); Discrete/MultiDiscrete values as int64, MultiBinary as int8, reward and
    done as float32. ``done`` is the *terminated* flag only: truncated transitions
    keep ``done == 0`` so the learner still bootstraps from ``next_obs``.
    """

    def __init__(
        self,
        max_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: str | torch.device = "cpu",
        float_dtype: np.dtype[Any] | type | None = None,
        seed: int | None = None,
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        fdt = None if float_dtype is None else np.dtype(float_dtype)
        self.obs_spec: Spec = space_spec(observation_space, fdt)
        self.action_spec: Spec = space_spec(action_space, fdt)
        super().__init__(max_size, self._fields(), device, seed)

    def _fields(self) -> dict[str, Spec]:
        return {
            "obs": self.obs_spec,
            "action": self.action_spec,
            "reward": REWARD_SPEC,
            "next_obs": self.obs_spec,
            "done": DONE_SPEC,
        }

    def add(
        self,
        obs: Nested,
        action: Any,
        reward: Any,
        next_obs: Nested,
        terminated: Any,
        *,
        truncated: Any = None,
        mask: Any = None,
    ) -> np.ndarray:
        """Store one row per sub-environment; return the storage indices written (int64).

        All arguments are batched over ``num_envs`` (leading dim; numpy arrays or
        tensors; obs may be dict/tuple nests). ``terminated`` becomes ``done``;
        ``truncated`` is accepted for call-compatibility with
        :class:`MultiStepReplayBuffer` and ignored (truncation never zeroes the
        bootstrap). ``mask`` (bool ``[num_envs]``) keeps only the rows where it is
        True, e.g. ``mask = ~(prev_terminated | prev_truncated)`` drops the
        Gymnasium next-step autoreset transition.
        """
        del truncated
        rew = to_numpy(reward).reshape(-1)
        n = rew.shape[0]
        rows = {
            "obs": as_rows(self.obs_spec, obs, n),
            "action": as_rows(self.action_spec, action, n),
            "reward": rew,
            "next_obs": as_rows(self.obs_spec, next_obs, n),
            "done": to_numpy(terminated).reshape(n),
        }
        keep = row_selection(mask, n)
        if keep is not None:
            rows = {name: select_rows(data, keep) for name, data in rows.items()}
            n = keep.shape[0]
        return self._write_rows(rows, n)

    def sample(self, batch_size: int, rng: np.random.Generator | None = None) -> ReplayBatch:
        """Sample ``batch_size`` transitions uniformly with replacement."""
        return self._batch(self.sample_indices(batch_size, rng))

    def sample_from_indices(self, indices: Any) -> ReplayBatch:
        """Return the transitions stored at ``indices``."""
        return self._batch(self._check_indices(indices))

    def _batch(self, idx: np.ndarray) -> ReplayBatch:
        f = self._gather(idx)
        return ReplayBatch(f["obs"], f["action"], f["reward"], f["next_obs"], f["done"], idx)
