"""Minibatches of a :class:`~agile_onpolicy.rollout.buffer.RolloutBuffer`'s valid rows: shuffled
flat rows, or per-env BPTT sequences (planned by :mod:`agile_onpolicy.rollout.sequences`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch

from agile_core.training.tensor_tree import map_tree
from agile_onpolicy.rollout.batches import RecurrentBatch, RolloutBatch
from agile_onpolicy.rollout.hidden import HiddenStateStore
from agile_onpolicy.rollout.sequences import SequenceType, plan_sequences

if TYPE_CHECKING:
    from agile_onpolicy.rollout.buffer import RolloutBuffer

__all__ = ["row_indices", "row_minibatches", "sequence_minibatches"]


def row_minibatches(buffer: RolloutBuffer, batch_size: int, rng: np.random.Generator, *,
                    normalize_advantages: bool, drop_last: bool) -> Iterator[RolloutBatch]:
    """One epoch of shuffled flat minibatches (see :meth:`RolloutBuffer.minibatches`)."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    n = buffer.size
    adv = buffer._training_advantages(normalize_advantages).flatten(0, 1)

    def flat(leaf: torch.Tensor) -> torch.Tensor:
        return leaf[:n].flatten(0, 1)

    obs = map_tree(flat, buffer.observations)
    actions = map_tree(flat, buffer.actions)
    log_probs, values, returns = flat(buffer.log_probs), flat(buffer.values), flat(buffer.returns)
    masks = None if buffer.action_masks is None else flat(buffer.action_masks)
    for rows in buffer.minibatch_indices(batch_size, rng, drop_last=drop_last):
        idx = torch.as_tensor(rows, device=buffer.device)
        yield RolloutBatch(
            obs=map_tree(lambda leaf, i=idx: leaf[i], obs),
            actions=map_tree(lambda leaf, i=idx: leaf[i], actions),
            old_log_probs=log_probs[idx],
            old_values=values[idx],
            advantages=adv[idx],
            returns=returns[idx],
            indices=idx,
            action_masks=None if masks is None else masks[idx],
        )


def row_indices(buffer: RolloutBuffer, batch_size: int, rng: np.random.Generator, *,
                drop_last: bool) -> Iterator[np.ndarray]:
    """The flat row indices of one epoch (see :meth:`RolloutBuffer.minibatch_indices`)."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    flat_valid = buffer.valid[: buffer.size].reshape(-1).cpu().numpy()
    order = rng.permutation(np.flatnonzero(flat_valid))
    stop = len(order) - len(order) % batch_size if drop_last else len(order)
    for begin in range(0, stop, batch_size):
        yield order[begin : begin + batch_size]


def sequence_minibatches(buffer: RolloutBuffer, hidden: HiddenStateStore | None, seq_len: int | None,
                         batch_size_in_sequences: int, rng: np.random.Generator, sequence_type: SequenceType, *,
                         normalize_advantages: bool) -> Iterator[RecurrentBatch]:
    """One epoch of shuffled BPTT minibatches, the initial states taken from `hidden` (see
    :meth:`RolloutBuffer.recurrent_minibatches`)."""
    if hidden is None:
        raise RuntimeError("recurrent_minibatches needs a recurrent buffer")
    if batch_size_in_sequences < 1:
        raise ValueError("batch_size_in_sequences must be >= 1")
    n = buffer.size
    adv = buffer._training_advantages(normalize_advantages)
    plan = plan_sequences(
        n, buffer.num_envs, seq_len, sequence_type, valid=buffer.valid[:n].cpu().numpy()
    )
    time_index, step_mask = plan.step_index()
    order = rng.permutation(plan.num_sequences)
    # every sequence gathered once; a minibatch is then one index per field
    every = _sequence_batch(buffer, hidden, adv, plan.env, plan.start, time_index, step_mask, plan.owned_mask())
    for begin in range(0, len(order), batch_size_in_sequences):
        chosen = torch.as_tensor(order[begin : begin + batch_size_in_sequences], device=buffer.device)
        yield every.select_sequences(chosen, hidden.batch_dim)


def _sequence_batch(
    buffer: RolloutBuffer,
    hidden: HiddenStateStore,
    advantages: torch.Tensor,
    envs: np.ndarray,
    starts: np.ndarray,
    time_index: np.ndarray,
    step_mask: np.ndarray,
    owned: np.ndarray,
) -> RecurrentBatch:
    """Gather one :class:`RecurrentBatch` from index arrays of shape ``[L, B]``/``[B]``."""
    dev = buffer.device
    env_t = torch.as_tensor(envs, device=dev)
    ti = torch.as_tensor(time_index, device=dev)
    ei = env_t[None, :].expand_as(ti)
    mask = torch.as_tensor(step_mask, device=dev)

    def pick(leaf: torch.Tensor) -> torch.Tensor:
        out = leaf[ti, ei]
        out[~mask] = 0
        return out

    valid_mask = pick(buffer.valid)
    return RecurrentBatch(
        obs=map_tree(pick, buffer.observations),
        actions=map_tree(pick, buffer.actions),
        old_log_probs=pick(buffer.log_probs),
        old_values=pick(buffer.values),
        advantages=pick(advantages),
        returns=pick(buffer.returns),
        initial_hidden=hidden.gather(torch.as_tensor(starts, device=dev), env_t),
        episode_starts=pick(buffer.episode_starts),
        step_mask=mask,
        valid_mask=valid_mask,
        loss_mask=valid_mask & torch.as_tensor(owned, device=dev),
        time_indices=torch.where(mask, ti, torch.full_like(ti, -1)),
        env_indices=env_t,
        action_masks=None if buffer.action_masks is None else pick(buffer.action_masks),
    )
