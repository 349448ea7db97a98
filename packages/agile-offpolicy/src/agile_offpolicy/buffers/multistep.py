"""N-step replay with per-sub-environment windows.

Alignment contract with a 1-step buffer (Rainbow: n-step returns + PER)
-----------------------------------------------------------------------
:meth:`MultiStepReplayBuffer.add` returns, as :class:`Transitions`, the 1-step
transitions ``(obs_t, a_t, r_t, next_obs_t, terminated_t)`` whose n-step
transitions it has just stored, in the same order. Feed them (and only them)
to the 1-step buffer, ``per.add(*transitions)``: if both buffers have the same
``max_size`` and start empty, they then hold the same starting transition at
every storage index (``per.ptr == nstep.ptr`` always), so
``nstep.sample_from_indices(per_batch.indices)`` gives the n-step view of a
prioritised sample. Do not mask again when adding the returned rows; masking
already happened in ``nstep.add``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_core.buffers.batch import NStepBatch, Transitions
from agile_core.buffers.replay import DONE_SPEC, REWARD_SPEC, row_selection
from agile_core.buffers.ring import RingBuffer, StateDict
from agile_core.buffers.spaces import (
    LeafSpec,
    Nested,
    Spec,
    allocate,
    as_rows,
    gather,
    iter_leaves,
    select_rows,
    space_spec,
    to_numpy,
    write,
)

__all__ = ["MultiStepReplayBuffer"]


class MultiStepReplayBuffer(RingBuffer):
    """Replay of n-step transitions built online from batched vector-env steps.

    Each sub-environment keeps a window of its last (at most ``n_step``) transitions
    of the current episode. When a window is full its oldest transition is stored as
    ``(obs_t, a_t, R = sum_k gamma^k r_{t+k}, next_obs_{t+n}, done=0, n_steps=n)``.
    At an episode end every pending start of that sub-environment is stored with the
    truncated return up to the end, ``next_obs`` = the true final observation,
    ``done`` = terminated (a truncation keeps ``done == 0`` and bootstraps) and
    ``n_steps`` = the number of rewards summed. Windows never cross episodes.
    """

    def __init__(
        self,
        max_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        n_step: int,
        gamma: float,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        float_dtype: np.dtype[Any] | type | None = None,
        seed: int | None = None,
    ) -> None:
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.observation_space = observation_space
        self.action_space = action_space
        self.n_step = int(n_step)
        self.gamma = float(gamma)
        self.num_envs = int(num_envs)
        fdt = None if float_dtype is None else np.dtype(float_dtype)
        self.obs_spec: Spec = space_spec(observation_space, fdt)
        self.action_spec: Spec = space_spec(action_space, fdt)
        fields: dict[str, Spec] = {
            "obs": self.obs_spec,
            "action": self.action_spec,
            "reward": REWARD_SPEC,
            "next_obs": self.obs_spec,
            "done": DONE_SPEC,
            "n_steps": LeafSpec((), np.dtype(np.int64)),
        }
        super().__init__(max_size, fields, device, seed)
        self._allocate_windows()
        self._discounts = self.gamma ** np.arange(self.n_step, dtype=np.float64)

    def _allocate_windows(self) -> None:
        """Empty windows of ``n_step`` transitions for each of ``num_envs`` sub-environments."""
        win = (self.num_envs, self.n_step)
        self._window: dict[str, Nested] = {
            "obs": allocate(self.obs_spec, win),
            "action": allocate(self.action_spec, win),
            "reward": np.zeros(win, dtype=np.float64),
            "next_obs": allocate(self.obs_spec, win),
        }
        self._win_len = np.zeros(self.num_envs, dtype=np.int64)
        self._win_head = np.zeros(self.num_envs, dtype=np.int64)

    @property
    def pending(self) -> np.ndarray:
        """Number of transitions waiting in each sub-environment's window."""
        return self._win_len.copy()

    def clear_windows(self, num_envs: int | None = None) -> None:
        """Drop all pending (not yet stored) transitions, e.g. after a manual env reset; with
        `num_envs`, keep that many windows from now on (a population env steps ``agents x
        num_envs`` sub-environments)."""
        if num_envs is not None and num_envs != self.num_envs:
            if num_envs < 1:
                raise ValueError(f"num_envs must be >= 1, got {num_envs}")
            self.num_envs = int(num_envs)
            self._allocate_windows()
        self._win_len[:] = 0
        self._win_head[:] = 0

    def clear(self) -> None:
        """Forget stored transitions and pending windows."""
        super().clear()
        self.clear_windows()

    def add(
        self,
        obs: Nested,
        action: Any,
        reward: Any,
        next_obs: Nested,
        terminated: Any,
        truncated: Any,
        *,
        mask: Any = None,
    ) -> Transitions:
        """Push one vector-env step (rows for all ``num_envs``); store the n-step transitions that completed.

        ``mask`` (bool ``[num_envs]``) skips rows, e.g. the Gymnasium next-step
        autoreset row (``mask = ~(prev_terminated | prev_truncated)``); a skipped
        row does not touch its window. ``next_obs`` on a terminated/truncated row must be
        the true final observation (what next-step autoreset returns).

        Returns the 1-step transitions starting at the stored n-step transitions, in
        storage order: by sub-environment, then chronologically (see the module
        docstring for the alignment contract).
        """
        e = self.num_envs
        obs_r = as_rows(self.obs_spec, obs, e)
        act_r = as_rows(self.action_spec, action, e)
        rew = to_numpy(reward).reshape(e)
        next_all = as_rows(self.obs_spec, next_obs, e)
        next_r = next_all
        term = to_numpy(terminated).astype(bool, copy=False).reshape(e)
        trunc = to_numpy(truncated).astype(bool, copy=False).reshape(e)
        keep = row_selection(mask, e)
        active = np.arange(e) if keep is None else keep
        if keep is not None:
            obs_r, act_r, rew, next_r = (select_rows(x, keep) for x in (obs_r, act_r, rew, next_r))

        # push into windows
        slot = (self._win_head[active] + self._win_len[active]) % self.n_step
        loc = (active, slot)
        write(self._window["obs"], loc, obs_r)
        write(self._window["action"], loc, act_r)
        self._window["reward"][loc] = rew
        write(self._window["next_obs"], loc, next_r)
        self._win_len[active] += 1

        ended_mask = np.zeros(e, dtype=bool)
        ended_mask[active] = term[active] | trunc[active]
        full_mask = np.zeros(e, dtype=bool)
        full_mask[active] = self._win_len[active] == self.n_step
        full_envs = np.flatnonzero(full_mask & ~ended_mask)
        ended_envs = np.flatnonzero(ended_mask)
        out = self._emit(full_envs, ended_envs, term, next_all)

        self._win_head[full_envs] = (self._win_head[full_envs] + 1) % self.n_step
        self._win_len[full_envs] -= 1
        self._win_head[ended_envs] = 0
        self._win_len[ended_envs] = 0
        return out

    def _emit(
        self, full_envs: np.ndarray, ended_envs: np.ndarray, term: np.ndarray, next_obs: Nested
    ) -> Transitions:
        """Store the completed n-step transitions and return their 1-step counterparts."""
        counts = np.zeros(self.num_envs, dtype=np.int64)
        counts[full_envs] = 1
        counts[ended_envs] = self._win_len[ended_envs]
        env = np.repeat(np.arange(self.num_envs), counts)  # env-major, chronological per env
        k = np.arange(env.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
        length = self._win_len[env]
        taken = length - k
        steps = np.arange(self.n_step)
        slots = (self._win_head[env] + k)[:, None] + steps[None, :]
        slots %= self.n_step
        valid = steps[None, :] < taken[:, None]
        win_rew = self._window["reward"][env[:, None], slots]
        returns = (np.where(valid, win_rew, 0.0) * self._discounts).sum(axis=1)

        first = (env, slots[:, 0])
        obs = gather(self._window["obs"], first)
        action = gather(self._window["action"], first)
        done = term[env]
        rows = {
            "obs": obs,
            "action": action,
            "reward": returns,
            "next_obs": select_rows(next_obs, env),
            "done": done,
            "n_steps": taken,
        }
        self._write_rows(rows, env.shape[0])
        return Transitions(
            obs=obs,
            action=action,
            reward=win_rew[:, 0].astype(np.float32),
            next_obs=gather(self._window["next_obs"], first),
            terminated=done & (k == length - 1),
        )

    def sample(self, batch_size: int, rng: np.random.Generator | None = None) -> NStepBatch:
        """Sample ``batch_size`` n-step transitions uniformly with replacement."""
        return self._batch(self.sample_indices(batch_size, rng))

    def sample_from_indices(self, indices: Any) -> NStepBatch:
        """Return the n-step transitions at ``indices`` (e.g. a PER batch's ``indices``)."""
        return self._batch(self._check_indices(indices))

    def _batch(self, idx: np.ndarray) -> NStepBatch:
        f = self._gather(idx)
        return NStepBatch(
            f["obs"], f["action"], f["reward"], f["next_obs"], f["done"], f["n_steps"], idx
        )

    def state_dict(self) -> StateDict:
        """Checkpoint including the pending windows, so resuming mid-episode loses nothing."""
        state = super().state_dict()
        for name, store in self._window.items():
            for path, leaf in iter_leaves(store, name):
                state[f"window/{path}"] = leaf.copy()
        state["window_len"] = self._win_len.copy()
        state["window_head"] = self._win_head.copy()
        return state

    def load_state_dict(self, state: StateDict) -> None:
        """Restore from :meth:`state_dict` output (same spaces, sizes and ``n_step``; the saved
        number of windows)."""
        super().load_state_dict(state)
        self.clear_windows(int(np.asarray(state["window_len"]).shape[0]))  # as many windows as were saved
        for name, store in self._window.items():
            for path, leaf in iter_leaves(store, name):
                leaf[...] = np.asarray(state[f"window/{path}"]).reshape(leaf.shape)
        self._win_len[:] = np.asarray(state["window_len"])
        self._win_head[:] = np.asarray(state["window_head"])
