"""Vectorised sum/min segment trees for proportional prioritised replay."""

from __future__ import annotations

from typing import Any

import numpy as np

from agile_core.buffers.spaces import to_numpy

__all__ = ["SumMinTree"]


class SumMinTree:
    """A complete binary sum tree and min tree over ``capacity`` leaves in flat numpy arrays.

    Node ``i`` has children ``2i`` and ``2i + 1``; the root is node 1 and leaves start at
    ``base`` (the next power of two >= capacity). Unused leaves hold 0 in the sum tree
    and +inf in the min tree. Updates and prefix-sum searches are batched: one numpy
    operation per tree level for the whole batch.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self.depth = max(1, int(np.ceil(np.log2(self.capacity))))
        self.base = 1 << self.depth
        self.sums = np.zeros(2 * self.base, dtype=np.float64)
        self.mins = np.full(2 * self.base, np.inf, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of all leaf values."""
        return float(self.sums[1])

    @property
    def min(self) -> float:
        """Smallest leaf value among set leaves (+inf when none is set)."""
        return float(self.mins[1])

    def leaves(self, indices: Any) -> np.ndarray:
        """Values of the given leaves."""
        return self.sums[self.base + to_numpy(indices).astype(np.int64, copy=False)]

    def update(self, indices: Any, values: Any) -> None:
        """Set leaves ``indices`` to ``values``; for repeated indices the last one wins."""
        idx = to_numpy(indices).astype(np.int64, copy=False).reshape(-1)
        val = np.broadcast_to(
            to_numpy(values).astype(np.float64, copy=False).reshape(-1), idx.shape
        )
        if idx.size == 0:
            return
        if idx.size > 1:
            rev_unique, rev_pos = np.unique(idx[::-1], return_index=True)
            idx, val = rev_unique, val[::-1][rev_pos]
        if idx.min() < 0 or idx.max() >= self.capacity:
            raise IndexError("leaf index out of range")
        pos = idx + self.base
        self.sums[pos] = val
        self.mins[pos] = val
        sums, mins = self.sums, self.mins
        for _ in range(self.depth):
            # repeated parents in `pos` compute identical values, so duplicates are harmless
            pos >>= 1
            left = pos << 1
            right = left + 1
            sums[pos] = sums[left] + sums[right]
            mins[pos] = np.minimum(mins[left], mins[right])

    def update_span(self, start: int, values: Any) -> None:
        """Set the contiguous leaves ``start .. start + len(values) - 1`` (slice ops per level)."""
        val = to_numpy(values).astype(np.float64, copy=False).reshape(-1)
        lo, hi = int(start), int(start) + val.shape[0]
        if lo == hi:
            return
        if lo < 0 or hi > self.capacity:
            raise IndexError("leaf span out of range")
        lo, hi = lo + self.base, hi + self.base
        self.sums[lo:hi] = val
        self.mins[lo:hi] = val
        sums, mins = self.sums, self.mins
        for _ in range(self.depth):
            lo, hi = lo >> 1, ((hi - 1) >> 1) + 1
            left, right = slice(2 * lo, 2 * hi, 2), slice(2 * lo + 1, 2 * hi, 2)
            np.add(sums[left], sums[right], out=sums[lo:hi])
            np.minimum(mins[left], mins[right], out=mins[lo:hi])

    def reset(self) -> None:
        """Clear every leaf."""
        self.sums[:] = 0.0
        self.mins[:] = np.inf

    def find_prefix(self, mass: Any) -> np.ndarray:
        """Leaf index for each prefix mass: the first leaf whose cumulative sum exceeds it.

        One vectorised descent for the whole batch. Never returns a zero-valued leaf
        while the total is positive: the rare samples that float round-off sends into
        an empty subtree are redone with a guarded descent.
        """
        u = np.array(mass, dtype=np.float64).reshape(-1)
        node = self._descend(u.copy(), guard=False)
        bad = self.sums[node] <= 0.0
        if bad.any():
            node[bad] = self._descend(u[bad], guard=True)
        return node - self.base

    def _descend(self, u: np.ndarray, guard: bool) -> np.ndarray:
        """Walk from the root to a leaf node for each (mutated) mass in ``u``."""
        node = np.ones(u.shape, dtype=np.int64)
        sums = self.sums
        for _ in range(self.depth):
            node <<= 1  # left child
            left = sums[node]
            go_right = u >= left
            if guard:
                go_right &= sums[node + 1] > 0.0
            u -= left * go_right
            node += go_right
        return node
