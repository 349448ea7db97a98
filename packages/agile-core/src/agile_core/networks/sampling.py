"""Resolving mutation parameters: sample what the caller left out, check what the caller gave."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agile_core.networks.base import MutationError

NODE_CHOICES: tuple[int, ...] = (16, 32, 64)
"""Node counts add_node/remove_node sample from (clipped to the room left within bounds)."""
CHANNEL_CHOICES: tuple[int, ...] = (8, 16, 32)
"""Channel counts add_channel/remove_channel sample from (clipped to the room left)."""
LATENT_CHOICES: tuple[int, ...] = (8, 16, 32)
"""Latent sizes add_latent_node/remove_latent_node sample from (clipped to the room left)."""


def resolve_index(value: int | None, candidates: Sequence[int], rng: np.random.Generator, what: str) -> int:
    """`value` if it is one of `candidates`, else a uniform draw from them when `value` is None."""
    if not candidates:
        raise MutationError(f"no {what} can take this mutation within its bounds")
    if value is None:
        return int(candidates[int(rng.integers(len(candidates)))])
    value = int(value)
    if value not in candidates:
        raise MutationError(f"{what} {value} cannot take this mutation; allowed: {list(candidates)}")
    return value


def resolve_count(value: int | None, room: int, choices: Sequence[int], rng: np.random.Generator, what: str) -> int:
    """`value` if 1 <= value <= room, else (when None) a draw from `choices` clipped to `room`."""
    if room < 1:
        raise MutationError(f"no room left for {what} within the bounds")
    if value is None:
        return min(int(choices[int(rng.integers(len(choices)))]), room)
    value = int(value)
    if not 1 <= value <= room:
        raise MutationError(f"{what}={value} is outside [1, {room}] allowed by the bounds")
    return value
