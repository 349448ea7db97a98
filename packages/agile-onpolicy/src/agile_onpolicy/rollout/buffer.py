"""Preallocated on-policy rollout buffer aware of Gymnasium 1.x next-step autoreset.

Row contract (one row per vector step ``t`` and sub-environment ``n``)
---------------------------------------------------------------------
Row ``t`` holds the observation the policy *acted on* (``obs_t``), the action it
took, the value and log-probability it computed for ``obs_t``, and what
``env.step(action)`` returned for that sub-environment: ``reward``, ``terminated``,
``truncated``. ``valid`` is False when this step was an *autoreset step*: with
Gymnasium 1.x's default ``AutoresetMode.NEXT_STEP``, the step after the one that
ended an episode ignores the action, returns reward 0 and the reset observation.
Such rows are kept (so time stays aligned and recurrent states can be replayed) but
get advantage 0 and never reach a minibatch or the advantage statistics.

Bootstrapping
-------------
* termination: no bootstrap; the advantage recursion is cut.
* truncation (and not termination): bootstrap from ``V(true final observation)``,
  given with ``add(..., final_value=...)`` or :meth:`RolloutBuffer.set_truncation_values`
  (or taken from the autoreset row, see ``truncation_bootstrap``); the recursion is cut.
* otherwise: bootstrap from the next row's value, or ``last_value`` after the last row.

Training loop with a Gymnasium 1.x vector env (next-step autoreset)::

    obs, _ = envs.reset(seed=seed)
    autoreset = np.zeros(num_envs, dtype=bool)      # next step() is an autoreset step
    for _ in range(num_steps):
        with torch.no_grad():
            action, log_prob, value = policy(obs)
        next_obs, reward, terminated, truncated, _ = envs.step(action.cpu().numpy())
        valid = ~autoreset
        final_value = None
        if (truncated & valid).any():                # next_obs is the true final obs
            with torch.no_grad():
                final_value = policy.value(next_obs)
        buffer.add(obs, action, reward, terminated, truncated, value, log_prob,
                   valid, final_value=final_value)
        autoreset = terminated | truncated
        obs = next_obs
    with torch.no_grad():
        last_value = policy.value(obs)
    buffer.compute_returns_and_advantages(last_value, last_done=autoreset)

``obs`` and ``autoreset`` carry over to the next rollout (after ``buffer.reset()``):
its first row is an autoreset row for envs whose last step ended an episode.
Because the observation of the autoreset row *is* the true final observation, the
``final_value`` pass can be skipped by computing with
``truncation_bootstrap="autoreset_row"``, which reuses the value stored on the
autoreset row (or ``last_value`` when the truncation is on the last row).

Recurrent policies also store the state fed to the policy at each step and zero it
where an episode begins, i.e. on the row *after* an autoreset row (the autoreset
row itself still belongs to the old episode: its observation is the final one)::

    episode_start = np.ones(num_envs, dtype=bool)   # carried across rollouts too
    ...
        hidden = tuple(h * torch.as_tensor(~episode_start)[None, :, None] for h in hidden)
        action, log_prob, value, next_hidden = policy(obs, hidden)
        ...
        buffer.add(obs, action, reward, terminated, truncated, value, log_prob, valid,
                   hidden=hidden, episode_start=episode_start, final_value=final_value)
        episode_start, autoreset = autoreset, terminated | truncated
        hidden = next_hidden

During BPTT the policy replays each :class:`RecurrentBatch` from its
``initial_hidden``, zeroing the state before every step flagged in ``episode_starts``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_core.training.advantages import normalize_advantages
from agile_core.training.tensor_tree import TensorTree, allocate, as_tensor, write_row
from agile_onpolicy.rollout.batches import RecurrentBatch, RolloutBatch
from agile_onpolicy.rollout.hidden import HiddenShapes, HiddenStateStore
from agile_onpolicy.rollout.returns import (
    TruncationBootstrap,
    compute_returns_and_advantages,
    compute_returns_and_advantages_together,
)
from agile_onpolicy.rollout.sampling import row_indices, row_minibatches, sequence_minibatches
from agile_onpolicy.rollout.sequences import SequenceType

__all__ = ["RolloutBuffer", "TruncationBootstrap", "compute_returns_and_advantages_together"]


class RolloutBuffer:
    """Fixed-size ``[num_steps, num_envs]`` storage of one on-policy rollout.

    ``observation_space``/``action_space`` are the *single* (per sub-environment)
    spaces, e.g. ``envs.single_observation_space``. Observations may be Box, Discrete,
    MultiDiscrete, MultiBinary or Dict/Tuple nestings of them (stored as nested
    tensors); actions Box, Discrete, MultiDiscrete or MultiBinary. With
    ``recurrent=True``, ``hidden_state_shapes`` gives the structure of the policy's
    recurrent state (a shape, a tuple of shapes such as LSTM ``(h, c)``, or a dict of
    shapes), each shape in the policy's convention, with ``num_envs`` at dimension
    ``hidden_batch_dim`` (1 for ``nn.LSTM``/``nn.GRU``: ``[layers, num_envs, hidden]``).

    Storage attributes (all ``[num_steps, num_envs, ...]`` on ``device``):
    ``observations``, ``actions`` (tensor trees), ``rewards``, ``values``,
    ``log_probs``, ``truncation_values``, ``advantages``, ``returns`` (float32),
    ``terminations``, ``truncations``, ``valid``, ``episode_starts`` (bool),
    ``hidden_states`` (tensor tree ``[num_steps, num_envs, *rest]``, recurrent only) and
    ``action_masks`` (bool ``[num_steps, num_envs, n]``, True = allowed; Discrete and
    MultiDiscrete actions only, with ``n`` the number of actions or ``sum(nvec)``).
    ``action_masks`` is None until a row is added with a mask; from then on rows added
    without one allow every action.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: str | torch.device = "cpu",
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        use_gae: bool = True,
        recurrent: bool = False,
        hidden_state_shapes: HiddenShapes | None = None,
        hidden_batch_dim: int = 1,
    ) -> None:
        if num_steps < 1 or num_envs < 1:
            raise ValueError("num_steps and num_envs must be >= 1")
        if not 0.0 <= gamma <= 1.0 or not 0.0 <= gae_lambda <= 1.0:
            raise ValueError("gamma and gae_lambda must lie in [0, 1]")
        if recurrent and hidden_state_shapes is None:
            raise ValueError("recurrent=True needs hidden_state_shapes")
        if not recurrent and hidden_state_shapes is not None:
            raise ValueError("hidden_state_shapes is only used with recurrent=True")
        self.num_steps, self.num_envs = num_steps, num_envs
        self.observation_space, self.action_space = observation_space, action_space
        self.device = torch.device(device)
        self.gamma, self.gae_lambda, self.use_gae = gamma, gae_lambda, use_gae
        self.recurrent = recurrent
        lead = (num_steps, num_envs)
        self.observations: TensorTree = allocate(observation_space, lead, self.device)
        self.actions: TensorTree = allocate(action_space, lead, self.device)
        self.rewards = self._zeros(torch.float32)
        self.values = self._zeros(torch.float32)
        self.log_probs = self._zeros(torch.float32)
        self.truncation_values = self._zeros(torch.float32)
        self.advantages = self._zeros(torch.float32)
        self.returns = self._zeros(torch.float32)
        self.terminations = self._zeros(torch.bool)
        self.truncations = self._zeros(torch.bool)
        self.valid = self._zeros(torch.bool)
        self.episode_starts = self._zeros(torch.bool)
        self._has_truncation_value = self._zeros(torch.bool)
        self._hidden = (
            HiddenStateStore(
                hidden_state_shapes, num_steps, num_envs, self.device, hidden_batch_dim
            )
            if hidden_state_shapes is not None
            else None
        )
        self.action_masks: torch.Tensor | None = None
        self._mask_size = _action_mask_size(action_space)
        self._next_episode_start = torch.ones(num_envs, dtype=torch.bool, device=self.device)
        self._pos = 0
        self._computed = False

    def _zeros(self, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(self.num_steps, self.num_envs, dtype=dtype, device=self.device)

    def _env_vector(self, value: Any, dtype: torch.dtype, name: str) -> torch.Tensor:
        like = torch.empty(self.num_envs, dtype=dtype, device=self.device)
        return as_tensor(value, like, name)

    # ------------------------------------------------------------------ state
    @property
    def size(self) -> int:
        """Number of vector steps stored so far (rows ``0 .. size - 1``)."""
        return self._pos

    @property
    def full(self) -> bool:
        """True once ``num_steps`` rows have been added."""
        return self._pos == self.num_steps

    @property
    def num_valid(self) -> int:
        """Number of valid (non-autoreset) ``(step, env)`` rows stored."""
        return int(self.valid[: self._pos].sum().item())

    @property
    def hidden_states(self) -> TensorTree:
        """Stored recurrent states, ``[num_steps, num_envs, *rest]`` per leaf."""
        if self._hidden is None:
            raise AttributeError("this buffer is not recurrent")
        return self._hidden.storage

    def reset(self, episode_start: Any = None) -> None:
        """Empty the buffer for the next rollout (storage is reused, not reallocated).

        The episode-start carry (whether the next added row begins an episode, used
        when ``add`` derives ``episode_start``) survives, since the next rollout
        continues the same environments; pass ``episode_start`` (bool or ``[num_envs]``)
        to override it, e.g. after resetting the environments.
        """
        self._pos = 0
        self._computed = False
        for tensor in (self.valid, self._has_truncation_value, self.episode_starts):
            tensor.zero_()
        for tensor in (self.truncation_values, self.advantages, self.returns):
            tensor.zero_()
        if episode_start is not None:
            flag = torch.as_tensor(episode_start, dtype=torch.bool, device=self.device)
            self._next_episode_start = flag.expand(self.num_envs).clone()

    # ------------------------------------------------------------------ writing
    def add(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        value: Any,
        log_prob: Any,
        valid: Any,
        hidden: Any = None,
        episode_start: Any = None,
        final_value: Any = None,
        action_mask: Any = None,
    ) -> int:
        """Write one vector step in place at row :attr:`size` and return that row index.

        Every argument is a tensor, numpy array or list with leading dimension
        ``num_envs`` (``[num_envs, 1]`` is accepted for per-env scalars):

        * ``obs``: the observation the policy acted on (nesting matches the space);
        * ``action``: the action sent to ``env.step``;
        * ``reward``, ``terminated``, ``truncated``: what that step returned;
        * ``value``, ``log_prob``: the policy's ``V(obs)`` and ``log pi(action|obs)``
          (log-prob summed over action dimensions);
        * ``valid``: False for sub-environments whose step was an autoreset step
          (their previous step terminated or truncated); their row is masked out;
        * ``hidden`` (recurrent only, required): the recurrent state fed to the
          policy at this step, policy convention (see class docstring);
        * ``episode_start`` (recurrent bookkeeping): True where this row begins an
          episode, i.e. the policy zeroed its state before this step. When omitted it
          is derived: a valid row begins an episode if the previous row of that env
          was an autoreset row or ended an episode (or it is the very first row);
        * ``final_value``: ``[num_envs]`` values of the true final observation; used
          only where ``truncated`` and not ``terminated`` (other entries ignored);
        * ``action_mask`` (Discrete/MultiDiscrete only): ``[num_envs, n]`` truthy =
          allowed, the mask the policy sampled ``action`` under; minibatches carry it so
          that learning re-scores actions under the same masked distribution.
        """
        if self.full:
            raise RuntimeError("rollout buffer is full; call reset() first")
        if self._hidden is not None and hidden is None:
            raise ValueError("a recurrent buffer needs the hidden state of every step")
        if self._hidden is None and hidden is not None:
            raise ValueError("hidden given to a non-recurrent buffer")
        row = self._pos
        valid_t = self._env_vector(valid, torch.bool, "valid")
        term_t = self._env_vector(terminated, torch.bool, "terminated")
        trunc_t = self._env_vector(truncated, torch.bool, "truncated")
        write_row(self.observations, row, obs, "obs")
        write_row(self.actions, row, action, "action")
        self.rewards[row] = self._env_vector(reward, torch.float32, "reward")
        self.values[row] = self._env_vector(value, torch.float32, "value")
        self.log_probs[row] = self._env_vector(log_prob, torch.float32, "log_prob")
        self.terminations[row], self.truncations[row], self.valid[row] = term_t, trunc_t, valid_t
        if self._hidden is not None:
            self._hidden.write(row, hidden)
        if episode_start is None:
            self.episode_starts[row] = valid_t & self._next_episode_start
        else:
            self.episode_starts[row] = self._env_vector(episode_start, torch.bool, "episode_start")
        self._next_episode_start = ~valid_t | term_t | trunc_t
        self.truncation_values[row] = 0.0
        self._has_truncation_value[row] = False
        if action_mask is not None:
            self._write_action_mask(row, action_mask)
        elif self.action_masks is not None:
            self.action_masks[row] = True
        self._pos += 1
        self._computed = False
        if final_value is not None:
            self.set_truncation_values(row, trunc_t & ~term_t, final_value)
        return row

    def extend(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        value: Any,
        log_prob: Any,
        valid: Any,
        final_value: Any = None,
        action_mask: Any = None,
        hidden: Any = None,
        episode_start: Any = None,
    ) -> slice:
        """Write ``k`` consecutive vector steps at once and return the rows written.

        The same as ``k`` calls of :meth:`add`, one per leading index of the arguments, which
        all have leading dimensions ``[k, num_envs]``; ``final_value``, when given, is used where
        a row truncated without terminating. A recurrent buffer needs ``hidden`` (the states fed
        at each step, policy convention with a leading ``k``) and takes ``episode_start``
        ``[k, num_envs]`` as :meth:`add` does (derived when omitted). Loops that collect many
        steps before learning write them here in one go instead of paying ``add``'s per-call
        cost at every step.
        """
        if self._hidden is not None and hidden is None:
            raise ValueError("a recurrent buffer needs the hidden state of every step")
        if self._hidden is None and hidden is not None:
            raise ValueError("hidden given to a non-recurrent buffer")
        count = int(np.shape(reward)[0])
        if not 0 < count <= self.num_steps - self._pos:
            raise RuntimeError(f"cannot write {count} steps: {self.num_steps - self._pos} rows left in the buffer")
        rows = slice(self._pos, self._pos + count)
        valid_t = as_tensor(valid, self.valid[rows], "valid")
        term_t = as_tensor(terminated, self.terminations[rows], "terminated")
        trunc_t = as_tensor(truncated, self.truncations[rows], "truncated")
        write_row(self.observations, rows, obs, "obs")
        write_row(self.actions, rows, action, "action")
        self.rewards[rows] = as_tensor(reward, self.rewards[rows], "reward")
        self.values[rows] = as_tensor(value, self.values[rows], "value")
        self.log_probs[rows] = as_tensor(log_prob, self.log_probs[rows], "log_prob")
        self.terminations[rows], self.truncations[rows], self.valid[rows] = term_t, trunc_t, valid_t
        ends = ~valid_t | term_t | trunc_t  # the next row begins an episode
        if episode_start is None:
            self.episode_starts[rows] = valid_t & torch.cat([self._next_episode_start[None], ends[:-1]])
        else:
            self.episode_starts[rows] = as_tensor(episode_start, self.episode_starts[rows], "episode_start")
        self._next_episode_start = ends[-1].clone()
        if self._hidden is not None:
            self._hidden.write_rows(rows, hidden)
        bootstrap = trunc_t & ~term_t
        if final_value is None:
            self.truncation_values[rows] = 0.0
            self._has_truncation_value[rows] = False
        else:
            given = as_tensor(final_value, self.truncation_values[rows], "final_value")
            self.truncation_values[rows] = torch.where(bootstrap, given, torch.zeros_like(given))
            self._has_truncation_value[rows] = bootstrap
        if action_mask is not None:
            self._write_action_mask(rows, action_mask)
        elif self.action_masks is not None:
            self.action_masks[rows] = True
        self._pos += count
        self._computed = False
        return rows

    def _write_action_mask(self, row: int | slice, action_mask: Any) -> None:
        """Store `action_mask` at `row`, allocating the mask storage (all allowed) on first use."""
        if self._mask_size is None:
            raise ValueError(f"action masks apply to Discrete and MultiDiscrete action spaces, not {self.action_space}")
        if self.action_masks is None:
            self.action_masks = torch.ones(
                self.num_steps, self.num_envs, self._mask_size, dtype=torch.bool, device=self.device
            )
        slot = self.action_masks[row]
        slot.copy_(as_tensor(action_mask, slot, "action_mask"))  # nonzero entries become True

    def set_truncation_values(self, step: int, env_mask: Any, values: Any) -> None:
        """Give the bootstrap value ``V(true final obs)`` for truncations at row ``step``.

        ``step`` is a stored row (negative counts from :attr:`size`); ``env_mask`` is a
        ``[num_envs]`` bool mask (None = all envs) of the sub-environments to set;
        ``values`` is either ``[num_envs]`` (entries outside the mask ignored) or one
        value per selected env, in env order. Values are used only on valid rows that
        truncated without terminating.
        """
        if step < 0:
            step += self._pos
        if not 0 <= step < self._pos:
            raise IndexError(f"step {step} is not a stored row (size {self._pos})")
        if env_mask is None:
            mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        else:
            mask = self._env_vector(env_mask, torch.bool, "env_mask")
        count = int(mask.sum().item())
        vals = torch.as_tensor(values).detach().to(self.device, torch.float32).reshape(-1)
        if vals.numel() == self.num_envs:
            vals = vals[mask]
        elif vals.numel() != count:
            raise ValueError(
                f"values must have num_envs={self.num_envs} or {count} (masked) entries, "
                f"got {vals.numel()}"
            )
        self.truncation_values[step, mask] = vals
        self._has_truncation_value[step, mask] = True
        self._computed = False

    # ------------------------------------------------------------------ returns
    def compute_returns_and_advantages(
        self,
        last_value: Any,
        last_done: Any = None,
        *,
        truncation_bootstrap: TruncationBootstrap = "explicit",
    ) -> None:
        """Fill :attr:`advantages` and :attr:`returns` for the stored rows.

        ``last_value`` is ``[num_envs]`` ``V(obs)`` of the observation returned by the
        last ``step`` (the one the next rollout would act on); it bootstraps rows at
        the end of the buffer whose episode goes on. ``last_done`` (optional,
        ``[num_envs]`` bool) is ``terminated | truncated`` of that last step; it is
        checked against the stored flags and a mismatch raises :class:`ValueError`.

        Uses GAE(gamma, lambda) when ``use_gae`` else discounted Monte-Carlo returns
        (see :mod:`agile_core.training.advantages`). Every valid row that truncated
        without terminating needs a bootstrap value: with ``"explicit"`` all must have
        been given (``final_value``/:meth:`set_truncation_values`); with
        ``"autoreset_row"`` missing ones are taken from the value stored on the next
        row when that row is an autoreset row (its observation is the true final
        observation under next-step autoreset), or from ``last_value`` on the last
        row. Missing values raise :class:`ValueError`.
        """
        compute_returns_and_advantages(self, last_value, last_done, truncation_bootstrap)

    def _store_estimates(self, advantages: torch.Tensor, returns: torch.Tensor) -> None:
        n = self._pos
        self.advantages.zero_()
        self.returns.zero_()
        self.advantages[:n], self.returns[:n] = advantages, returns
        self._computed = True

    def _training_advantages(self, normalize: bool) -> torch.Tensor:
        if not self._computed:
            raise RuntimeError("call compute_returns_and_advantages() before sampling")
        n = self._pos
        adv = self.advantages[:n]
        return normalize_advantages(adv, self.valid[:n]) if normalize else adv

    # ------------------------------------------------------------------ sampling
    def minibatches(
        self,
        batch_size: int,
        rng: np.random.Generator,
        *,
        normalize_advantages: bool = False,
        drop_last: bool = False,
    ) -> Iterator[RolloutBatch]:
        """Yield one epoch of shuffled minibatches over the valid rows.

        Rows are flattened to ``step * num_envs + env``; every valid row appears in
        exactly one batch (the last one is smaller unless ``drop_last``), autoreset
        rows in none. With ``normalize_advantages`` advantages are standardised by
        the mean/std of all valid rows of the rollout (not per minibatch).
        """
        yield from row_minibatches(self, batch_size, rng, normalize_advantages=normalize_advantages,
                                   drop_last=drop_last)

    def minibatch_indices(
        self, batch_size: int, rng: np.random.Generator, *, drop_last: bool = False
    ) -> Iterator[np.ndarray]:
        """The flat row indices (``step * num_envs + env``) of one epoch of :meth:`minibatches`.

        The valid rows are shuffled with `rng` when the first batch is requested (one
        ``rng.permutation`` call per epoch), so drawing the indices consumes `rng` exactly as
        drawing the minibatches does.
        """
        yield from row_indices(self, batch_size, rng, drop_last=drop_last)

    def recurrent_minibatches(
        self,
        seq_len: int | None,
        batch_size_in_sequences: int,
        rng: np.random.Generator,
        sequence_type: SequenceType = "chunked",
        *,
        normalize_advantages: bool = False,
    ) -> Iterator[RecurrentBatch]:
        """Yield one epoch of shuffled minibatches of per-env sequences for BPTT.

        Each env's stored trajectory is cut into sequences (see
        :mod:`agile_onpolicy.rollout.sequences`; ``seq_len`` is ignored for
        ``"maximum"``), sequences owning no valid row are dropped, the rest are
        shuffled and yielded ``batch_size_in_sequences`` at a time as time-major
        :class:`RecurrentBatch` es carrying each sequence's stored initial hidden state,
        per-step ``episode_starts`` and padding/validity/loss masks.
        """
        yield from sequence_minibatches(self, self._hidden, seq_len, batch_size_in_sequences, rng, sequence_type,
                                        normalize_advantages=normalize_advantages)


def _action_mask_size(space: spaces.Space[Any]) -> int | None:
    """Entries of an action mask for `space` (None when the space takes no masks)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return int(space.nvec.sum())
    return None
