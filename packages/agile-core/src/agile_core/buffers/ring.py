"""Preallocated ring storage shared by all replay buffers."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .memory import check_fits
from .spaces import (
    Nested,
    Spec,
    allocate,
    gather,
    iter_leaves,
    nested_nbytes,
    select_rows,
    spec_row_bytes,
    to_numpy,
    to_torch,
    write,
)

__all__ = ["RingBuffer", "StateDict"]

StateDict = dict[str, Any]


class RingBuffer:
    """Fixed-capacity FIFO of named fields, each a nested tree of contiguous arrays.

    Rows are written in batches with slice assignments (at most two per leaf when
    the batch wraps around the end of the ring). Subclasses define the fields and
    the public ``add``/``sample`` API.
    """

    def __init__(
        self,
        max_size: int,
        fields: dict[str, Spec],
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        if max_size <= 0:
            raise ValueError(f"max_size must be positive, got {max_size}")
        self.max_size = int(max_size)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        self._specs = fields
        check_fits(self.max_size * sum(spec_row_bytes(spec) for spec in fields.values()), self.max_size)
        self._storage: dict[str, Nested] = {
            name: allocate(spec, (self.max_size,)) for name, spec in fields.items()
        }
        self.ptr = 0
        self._size = 0

    @property
    def size(self) -> int:
        """Number of stored transitions."""
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes of the transition storage arrays (preallocated for ``max_size`` rows)."""
        return sum(nested_nbytes(tree) for tree in self._storage.values())

    def _write_rows(self, rows: dict[str, Nested], n: int) -> np.ndarray:
        """Append ``n`` rows per field, overwriting the oldest; return the storage indices used.

        Row ``j`` goes to slot ``(ptr + j) % max_size``; when ``n > max_size`` only the
        last ``max_size`` rows survive, so only their slots are written and returned.
        """
        if n == 0:
            return np.empty(0, dtype=np.int64)
        start = self.ptr
        if n > self.max_size:  # rows that would be overwritten within this batch are skipped
            dropped = n - self.max_size
            rows = {name: select_rows(data, slice(dropped, None)) for name, data in rows.items()}
            start = (start + dropped) % self.max_size
            n = self.max_size
        first = min(n, self.max_size - start)
        for name, data in rows.items():
            store = self._storage[name]
            if first == n:
                write(store, slice(start, start + n), data)
            else:
                write(store, slice(start, self.max_size), select_rows(data, slice(0, first)))
                write(store, slice(0, n - first), select_rows(data, slice(first, n)))
        self.ptr = (start + n) % self.max_size
        self._size = min(self._size + n, self.max_size)
        return (start + np.arange(n, dtype=np.int64)) % self.max_size

    def sample_indices(self, batch_size: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """Uniform storage indices with replacement (int64)."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty buffer")
        return (self.rng if rng is None else rng).integers(
            0, self._size, size=batch_size, dtype=np.int64
        )

    def _check_indices(self, indices: Any) -> np.ndarray:
        idx = to_numpy(indices).astype(np.int64, copy=False).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self._size):
            raise IndexError(f"indices out of range for buffer of size {self._size}")
        return idx

    def _gather(self, indices: np.ndarray) -> dict[str, Nested]:
        """Fields at ``indices`` as tensors on ``self.device`` (one gather copy per leaf)."""
        return {
            name: to_torch(gather(store, indices), self.device)
            for name, store in self._storage.items()
        }

    def clear(self) -> None:
        """Forget all stored transitions (storage stays allocated)."""
        self.ptr = 0
        self._size = 0

    def state_dict(self) -> StateDict:
        """Plain checkpoint: ints plus copies of the filled rows of every leaf array (no pickle needed)."""
        state: StateDict = {"max_size": self.max_size, "ptr": self.ptr, "size": self._size}
        for name, store in self._storage.items():
            for path, leaf in iter_leaves(store, name):
                state[f"storage/{path}"] = leaf[: self._size].copy()
        return state

    def load_state_dict(self, state: StateDict) -> None:
        """Restore from :meth:`state_dict` output (same spaces and ``max_size`` required)."""
        if int(state["max_size"]) != self.max_size:
            raise ValueError(
                f"max_size mismatch: checkpoint {state['max_size']} vs buffer {self.max_size}"
            )
        size = int(state["size"])
        for name, store in self._storage.items():
            for path, leaf in iter_leaves(store, name):
                src = np.asarray(state[f"storage/{path}"])
                if src.shape != (size, *leaf.shape[1:]):
                    raise ValueError(f"shape mismatch for {path}: {src.shape}")
                leaf[:size] = src
        self._size = size
        self.ptr = int(state["ptr"])
