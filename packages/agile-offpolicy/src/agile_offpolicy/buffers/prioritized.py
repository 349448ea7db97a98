"""Proportional prioritised experience replay (Schaul et al., 2016)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_core.buffers.batch import PrioritizedBatch
from agile_core.buffers.replay import ReplayBuffer
from agile_core.buffers.ring import StateDict
from agile_core.buffers.spaces import Nested, to_numpy

from .segment_tree import SumMinTree

__all__ = ["PrioritizedReplayBuffer", "beta_schedule"]


def beta_schedule(beta_start: float, step: int, total_steps: int) -> float:
    """Importance-sampling exponent annealed linearly from ``beta_start`` to 1 over ``total_steps``."""
    if total_steps <= 0:
        return 1.0
    frac = min(max(step / total_steps, 0.0), 1.0)
    return beta_start + (1.0 - beta_start) * frac


class PrioritizedReplayBuffer(ReplayBuffer):
    """1-step replay sampled with probability ``P(i) = p_i^alpha / sum_j p_j^alpha``.

    Priorities live in a :class:`SumMinTree` (``p^alpha`` per leaf). New transitions
    get the largest priority seen so far (1.0 initially). Sampling is stratified:
    the total mass is cut into ``batch_size`` equal segments with one uniform draw in
    each, resolved by one vectorised tree descent. Importance weights are
    ``w_i = (N P(i))^-beta / max_j w_j`` where the max runs over all stored transitions.
    """

    def __init__(
        self,
        max_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        alpha: float = 0.6,
        device: str | torch.device = "cpu",
        float_dtype: np.dtype[Any] | type | None = None,
        seed: int | None = None,
        min_priority: float = 1e-8,
    ) -> None:
        super().__init__(max_size, observation_space, action_space, device, float_dtype, seed)
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = float(alpha)
        self.min_priority = float(min_priority)
        self.max_priority = 1.0
        self.tree = SumMinTree(self.max_size)

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
        """Store rows like :meth:`ReplayBuffer.add` and give them the current max priority."""
        idx = super().add(obs, action, reward, next_obs, terminated, truncated=truncated, mask=mask)
        if idx.size:
            prio = np.full(idx.shape[0], self.max_priority**self.alpha)
            wrap = self.max_size - int(idx[0])  # rows before the ring wraps to slot 0
            self.tree.update_span(int(idx[0]), prio[:wrap])
            self.tree.update_span(0, prio[wrap:])
        return idx

    def sample(  # type: ignore[override]
        self, batch_size: int, beta: float = 0.4, rng: np.random.Generator | None = None
    ) -> PrioritizedBatch:
        """Stratified proportional sample with importance weights for exponent ``beta``."""
        return self._prioritized_batch(self.sample_indices(batch_size, rng), beta)

    def sample_indices(self, batch_size: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """The storage indices :meth:`sample` draws: the total priority mass cut into `batch_size`
        equal segments, one uniform draw from `rng` (else the buffer's) in each."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty buffer")
        rng = self.rng if rng is None else rng
        total = self.tree.total
        mass = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        return self.tree.find_prefix(mass)

    def sample_from_indices(self, indices: Any, beta: float = 0.4) -> PrioritizedBatch:  # type: ignore[override]
        """Transitions at ``indices`` with their current importance weights."""
        return self._prioritized_batch(self._check_indices(indices), beta)

    def importance_weights(self, indices: np.ndarray, beta: float) -> np.ndarray:
        """``(N P(i))^-beta / max_j (N P(j))^-beta``, i.e. ``(p_i / p_min)^-beta`` (float32)."""
        p = self.tree.leaves(indices)
        return np.power(p / self.tree.min, -beta).astype(np.float32)

    def probabilities(self) -> np.ndarray:
        """Current sampling probability of every stored transition (index order)."""
        return self.tree.leaves(np.arange(self._size)) / self.tree.total

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Set raw priorities (e.g. ``|td_error| + eps``) of ``indices``; ``p^alpha`` is stored."""
        idx = self._check_indices(indices)
        pr = to_numpy(priorities).astype(np.float64, copy=False).reshape(-1)
        if pr.shape != idx.shape:
            raise ValueError(f"{pr.shape[0]} priorities for {idx.shape[0]} indices")
        if not np.all(np.isfinite(pr)):
            raise ValueError("priorities must be finite")
        pr = np.maximum(pr, self.min_priority)
        if pr.size:
            self.max_priority = max(self.max_priority, float(pr.max()))
        self.tree.update(idx, pr**self.alpha)

    def _prioritized_batch(self, idx: np.ndarray, beta: float) -> PrioritizedBatch:
        f = self._gather(idx)
        weights = torch.from_numpy(self.importance_weights(idx, beta))
        if self.device.type != "cpu":
            weights = weights.to(self.device)
        return PrioritizedBatch(
            f["obs"], f["action"], f["reward"], f["next_obs"], f["done"], weights, idx
        )

    def clear(self) -> None:
        """Forget stored transitions and priorities."""
        super().clear()
        self.tree.reset()
        self.max_priority = 1.0

    def state_dict(self) -> StateDict:
        """Checkpoint with the stored ``p^alpha`` per transition and the max raw priority."""
        state = super().state_dict()
        state["priorities"] = self.tree.leaves(np.arange(self._size)).copy()
        state["max_priority"] = self.max_priority
        return state

    def load_state_dict(self, state: StateDict) -> None:
        """Restore transitions and rebuild both trees from the saved leaf priorities."""
        super().load_state_dict(state)
        self.tree.reset()
        self.tree.update_span(0, np.asarray(state["priorities"], dtype=np.float64))
        self.max_priority = float(state["max_priority"])
