"""Sampling one batch per population member from a shared replay buffer, as one gather."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agile_core.algorithms.group import PopulationBatch
from agile_core.buffers.ring import RingBuffer
from agile_core.training.population import pad_index_batches

__all__ = ["draw_member_indices", "sample_population"]


def draw_member_indices(buffer: RingBuffer, members: Sequence[Any], active: Sequence[bool]) -> list[np.ndarray]:
    """Each active member's ``batch_size`` storage indices, drawn with its own ``rng`` (the
    buffer's when it has none) exactly as ``buffer.sample`` would; empty for idle members."""
    return [buffer.sample_indices(member.batch_size, member.rng) if on
            else np.zeros(0, dtype=np.int64) for member, on in zip(members, active, strict=True)]


def sample_population(buffer: Any, members: Sequence[Any], active: Sequence[bool],
                      device: torch.device | str) -> tuple[PopulationBatch, list[np.ndarray]]:
    """One uniform batch per active member of `members` from `buffer` (a ``ReplayBuffer``),
    gathered in one call and laid out ``[P, max_batch, ...]`` (padded rows repeat a valid index
    and weigh 0); also returns each member's sampled indices."""
    indices = draw_member_indices(buffer, members, active)
    padded, weights = pad_index_batches(indices)
    flat = buffer.sample_from_indices(padded.reshape(-1))
    return PopulationBatch.of_rows(flat, padded.shape[0], torch.as_tensor(weights, device=device)), indices
