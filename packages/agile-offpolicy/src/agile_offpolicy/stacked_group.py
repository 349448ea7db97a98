"""Helpers every population-batched off-policy group shares (DQN, DDPG/TD3).

A group's learning step draws one batch per active member with the member's own RNG (as the
one-by-one loop does), pads them to one ``[P, max_batch]`` block with loss weights, moves target
networks at each member's own rate, and counts the step for the members that took it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from agile_core.networks.stacked import FlatParameters
from agile_core.training.population import pad_index_batches
from agile_offpolicy.buffers import ReplayBuffer

__all__ = ["finish_learning_step", "sample_padded", "soft_update_flat", "unflatten"]

LossT = TypeVar("LossT")


def sample_padded(memory: ReplayBuffer, members: Sequence[Any], active: Sequence[bool],
                  device: torch.device | str) -> tuple[Any, ...]:
    """``(obs, action, reward, next_obs, done, weights)``: one batch per active member, drawn with
    the member's own ``rng`` exactly as ``memory.sample(member.batch_size, member.rng)`` draws it,
    gathered in one call and laid out ``[P, max_batch, ...]``; padded rows repeat a valid index and
    carry zero weight (``weights[p]`` is ``1 / batch_size`` on member ``p``'s own rows)."""
    indices = [memory.sample_indices(m.batch_size, getattr(m, "rng", None)) if on else np.zeros(0, dtype=np.int64)
               for m, on in zip(members, active, strict=True)]
    padded, weights = pad_index_batches(indices)
    batch = memory.sample_from_indices(padded.reshape(-1))
    shape = padded.shape
    obs, action, reward, next_obs, done = (
        unflatten(field, shape) for field in (batch.obs, batch.action, batch.reward, batch.next_obs, batch.done))
    return obs, action, reward, next_obs, done, torch.as_tensor(weights, device=device)


def unflatten(field: Any, shape: tuple[int, ...]) -> Any:
    """A flat ``[P * rows, ...]`` batch field (tensor, dict or tuple of them) as ``[P, rows, ...]``."""
    if isinstance(field, torch.Tensor):
        return field.reshape(*shape, *field.shape[1:])
    if isinstance(field, dict):
        return {key: unflatten(value, shape) for key, value in field.items()}
    if isinstance(field, tuple):
        return tuple(unflatten(value, shape) for value in field)
    return field


def soft_update_flat(target: FlatParameters, online: torch.Tensor, tau: torch.Tensor,
                     active: Sequence[bool] | None = None) -> None:
    """``target <- tau * online + (1 - tau) * target`` row by row (`tau` ``[P, 1]``, each member's
    own rate); rows whose `active` flag is false are left exactly as they were."""
    with torch.no_grad():
        weight = tau if active is None or all(active) else \
            tau * torch.tensor(list(active), dtype=tau.dtype, device=tau.device).unsqueeze(1)
        target.data.lerp_(online, weight)


def finish_learning_step(members: Sequence[Any], active: Sequence[bool],
                         losses: Sequence[LossT]) -> list[LossT | None]:
    """Count one learning step (``learn_counter``) for every active member; return each member's
    losses, None for the idle ones."""
    result: list[LossT | None] = []
    for member, on, loss in zip(members, active, losses, strict=True):
        if on:
            member.learn_counter += 1
        result.append(loss if on else None)
    return result
