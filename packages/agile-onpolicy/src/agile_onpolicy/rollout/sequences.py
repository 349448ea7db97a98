"""Cutting per-environment trajectories into fixed-length sequences for BPTT.

A rollout of ``T`` steps of ``N`` environments is cut, environment by environment,
into sequences of at most ``seq_len`` steps:

* ``"chunked"``: consecutive, non-overlapping chunks starting at ``0, L, 2L, ...``;
  the last one is shorter when ``L`` does not divide ``T``.
* ``"maximum"``: the whole rollout of an environment is one sequence (``L = T``).
* ``"fifty_percent_overlap"``: chunks of ``L`` starting every ``L // 2`` steps, until
  one reaches the end of the rollout. Each step is *owned* by the first sequence
  that covers it; in later sequences it is burn-in (it is replayed to warm up the
  recurrent state, but excluded from the loss mask), so every step is counted in
  the loss exactly once per epoch.

Sequences shorter than ``L`` are padded at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

import numpy as np

__all__ = ["SEQUENCE_TYPES", "SequencePlan", "SequenceType", "plan_sequences"]

SequenceType: TypeAlias = Literal["chunked", "maximum", "fifty_percent_overlap"]
SEQUENCE_TYPES: tuple[str, ...] = ("chunked", "maximum", "fifty_percent_overlap")


@dataclass(frozen=True)
class SequencePlan:
    """Where every sequence lies in the rollout (arrays indexed by sequence id ``s``).

    ``env[s]`` and ``start[s]`` locate the first step; ``length[s]`` is the number of
    real (non-padding) steps; steps at offsets ``>= owned_from[s]`` are owned by the
    sequence (counted in the loss). ``seq_len`` is the padded length of every sequence.
    """

    env: np.ndarray
    start: np.ndarray
    length: np.ndarray
    owned_from: np.ndarray
    seq_len: int

    @property
    def num_sequences(self) -> int:
        """Number of planned sequences."""
        return len(self.env)

    def step_index(self) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(time_index, step_mask)`` of shape ``[seq_len, S]``.

        ``time_index[k, s]`` is the rollout step of offset ``k`` in sequence ``s``
        (clamped to the last real step on padding); ``step_mask`` is False on padding.
        """
        offsets = np.arange(self.seq_len)[:, None]
        step_mask = offsets < self.length[None, :]
        last = self.start + np.maximum(self.length, 1) - 1
        time_index = np.minimum(self.start[None, :] + offsets, last[None, :])
        return time_index, step_mask

    def owned_mask(self) -> np.ndarray:
        """Return ``[seq_len, S]``: True where the step is real and owned by the sequence."""
        offsets = np.arange(self.seq_len)[:, None]
        _, step_mask = self.step_index()
        return step_mask & (offsets >= self.owned_from[None, :])


def _starts(num_steps: int, seq_len: int, sequence_type: str) -> tuple[list[int], int]:
    """Return the start steps of one environment's sequences and their padded length."""
    if sequence_type == "maximum":
        return [0], num_steps
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if sequence_type == "chunked":
        return list(range(0, num_steps, seq_len)), seq_len
    if sequence_type == "fifty_percent_overlap":
        if seq_len < 2:
            raise ValueError("fifty_percent_overlap needs seq_len >= 2")
        stride = seq_len // 2
        starts = [0]
        while starts[-1] + seq_len < num_steps:
            starts.append(starts[-1] + stride)
        return starts, seq_len
    raise ValueError(f"unknown sequence_type {sequence_type!r}; expected one of {SEQUENCE_TYPES}")


def plan_sequences(
    num_steps: int,
    num_envs: int,
    seq_len: int | None,
    sequence_type: str,
    valid: np.ndarray | None = None,
) -> SequencePlan:
    """Plan the sequences of a ``num_steps x num_envs`` rollout.

    ``seq_len`` is ignored (may be None) for ``"maximum"``. When ``valid``
    (``[num_steps, num_envs]`` bool) is given, sequences that own no valid step
    (e.g. a lone autoreset row) are dropped, since they contribute nothing to a loss.
    """
    if num_steps < 1:
        raise ValueError("cannot plan sequences over an empty rollout")
    if sequence_type != "maximum" and seq_len is None:
        raise ValueError(f"seq_len is required for sequence_type {sequence_type!r}")
    starts, padded_len = _starts(num_steps, seq_len or num_steps, sequence_type)
    start = np.asarray(starts, dtype=np.int64)
    length = np.minimum(padded_len, num_steps - start)
    previous_end = np.concatenate([[0], start[:-1] + padded_len])
    owned_from = np.maximum(previous_end - start, 0)
    plan = SequencePlan(
        env=np.repeat(np.arange(num_envs, dtype=np.int64), len(start)),
        start=np.tile(start, num_envs),
        length=np.tile(length, num_envs),
        owned_from=np.tile(owned_from, num_envs),
        seq_len=padded_len,
    )
    if valid is None:
        return plan
    time_index, _ = plan.step_index()
    owned_valid = plan.owned_mask() & valid[time_index, plan.env[None, :]]
    keep = owned_valid.any(axis=0)
    return SequencePlan(
        env=plan.env[keep],
        start=plan.start[keep],
        length=plan.length[keep],
        owned_from=plan.owned_from[keep],
        seq_len=plan.seq_len,
    )
