"""`BanditMemory`: one agent's (context, reward) pairs in preallocated arrays (a ring)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["BanditMemory"]


class BanditMemory:
    """A ring of up to `capacity` (context ``[dim]``, reward) pairs; the oldest go first when full."""

    def __init__(self, capacity: int, dim: int) -> None:
        if capacity < 1 or dim < 1:
            raise ValueError(f"capacity and dim must be >= 1, got {capacity}, {dim}")
        self.capacity, self.dim = int(capacity), int(dim)
        self.contexts = np.zeros((self.capacity, self.dim), dtype=np.float32)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.ptr = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, context: np.ndarray, reward: float) -> None:
        """Store one pair."""
        self.contexts[self.ptr] = context
        self.rewards[self.ptr] = reward
        self.ptr = (self.ptr + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """`rows` pairs drawn uniformly with replacement (contexts ``[rows, dim]``, rewards ``[rows]``)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty bandit memory")
        index = rng.integers(self.size, size=rows)
        return self.contexts[index], self.rewards[index]

    def empty_like(self) -> BanditMemory:
        """A new empty memory of the same capacity and width."""
        return BanditMemory(self.capacity, self.dim)

    def copy(self) -> BanditMemory:
        """An independent copy (a cloned agent's memory)."""
        twin = self.empty_like()
        twin.load_state_dict(self.state_dict())
        return twin

    def state_dict(self) -> dict[str, Any]:
        """Checkpoint form: ints and copies of the filled rows."""
        return {"capacity": self.capacity, "dim": self.dim, "ptr": self.ptr, "size": self.size,
                "contexts": self.contexts[:self.size].copy(), "rewards": self.rewards[:self.size].copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (same width; a smaller capacity keeps the newest rows)."""
        if int(state["dim"]) != self.dim:
            raise ValueError(f"the saved bandit memory holds contexts of {state['dim']} values, not {self.dim}")
        contexts = np.asarray(state["contexts"], dtype=np.float32)
        rewards = np.asarray(state["rewards"], dtype=np.float32)
        size, ptr = int(state["size"]), int(state["ptr"])
        if size > self.capacity:  # keep the newest `capacity` rows, oldest first
            order = (np.arange(size) + ptr) % size
            contexts, rewards, size, ptr = contexts[order][-self.capacity:], rewards[order][-self.capacity:], \
                self.capacity, 0
        self.contexts[:size], self.rewards[:size] = contexts[:size], rewards[:size]
        self.size, self.ptr = size, ptr % self.capacity
