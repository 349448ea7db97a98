"""Shared replay memory of joint multi-agent transitions, and the batches it gives.

One row holds one sub-env's joint transition: every agent's observation, action, reward, next
observation, termination and a validity mask (the agent was alive before the step and the
sub-env was not autoresetting). Storage is preallocated numpy, one array per agent and field
(and per leaf of Dict/Tuple observations), written as a ring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_core.buffers.memory import check_fits
from agile_core.buffers.spaces import spec_row_bytes
from agile_core.training.population import pad_index_batches

__all__ = ["MultiAgentBatch", "MultiAgentReplayBuffer"]

Nested = Any
"""An array, or a dict/tuple of them (Dict and Tuple observations)."""


@dataclass
class MultiAgentBatch:
    """Joint transitions per agent, laid out ``[P, B, ...]`` (or ``[B, ...]`` from :meth:`MultiAgentReplayBuffer.sample`).

    ``obs``/``next_obs``: raw observations as stored; ``action``: env actions as stored (ints for
    Discrete); ``reward``, ``done`` (termination only) and ``mask`` (1 where the agent's
    transition is valid) ``[P, B]``; ``weights`` ``[P, B]``: ``1 / batch_size`` on a member's own
    rows, 0 on padding and for idle members.
    """

    obs: dict[str, Nested]
    action: dict[str, torch.Tensor]
    reward: dict[str, torch.Tensor]
    next_obs: dict[str, Nested]
    done: dict[str, torch.Tensor]
    mask: dict[str, torch.Tensor]
    weights: torch.Tensor
    indices: list[np.ndarray] = field(default_factory=list)
    """Storage indices each member drew (empty for an idle one)."""

    def with_member_axis(self) -> MultiAgentBatch:
        """This batch with a leading member axis of 1 when it has none (a single agent's batch)."""
        if self.weights.dim() == 2:
            return self

        def lead(tree: Any) -> Any:
            if isinstance(tree, Mapping):
                return {key: lead(value) for key, value in tree.items()}
            if isinstance(tree, tuple):
                return tuple(lead(value) for value in tree)
            return tree.unsqueeze(0)

        return MultiAgentBatch(lead(self.obs), lead(self.action), lead(self.reward), lead(self.next_obs),
                               lead(self.done), lead(self.mask), self.weights.unsqueeze(0), self.indices)


# ---------------------------------------------------------------------- nested storage
@dataclass(frozen=True)
class _Leaf:
    shape: tuple[int, ...]
    dtype: np.dtype


def _layout(space: spaces.Space) -> Any:
    """The shape and dtype of one stored value of `space` (dict/tuple of them for Dict/Tuple)."""
    if isinstance(space, spaces.Dict):
        return {key: _layout(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_layout(sub) for sub in space.spaces)
    if isinstance(space, spaces.Discrete):
        return _Leaf((), np.dtype(np.int64))
    if isinstance(space, spaces.MultiDiscrete):
        return _Leaf(tuple(space.shape), np.dtype(np.int64))
    if isinstance(space, spaces.MultiBinary):
        return _Leaf(tuple(space.shape), np.dtype(np.int8))
    if isinstance(space, spaces.Box):
        return _Leaf(tuple(space.shape), np.dtype(space.dtype))
    raise ValueError(f"cannot store values of space {space}")


def _allocate(layout: Any, size: int) -> Nested:
    if isinstance(layout, dict):
        return {key: _allocate(sub, size) for key, sub in layout.items()}
    if isinstance(layout, tuple):
        return tuple(_allocate(sub, size) for sub in layout)
    return np.zeros((size, *layout.shape), dtype=layout.dtype)


def _map2(fn: Any, store: Nested, data: Any) -> Any:
    """`fn(leaf, data_leaf)` over a storage tree and the matching data tree."""
    if isinstance(store, dict):
        return {key: _map2(fn, sub, data[key]) for key, sub in store.items()}
    if isinstance(store, tuple):
        return tuple(_map2(fn, sub, part) for sub, part in zip(store, data, strict=True))
    return fn(store, data)


def _map(fn: Any, tree: Any) -> Any:
    if isinstance(tree, dict):
        return {key: _map(fn, sub) for key, sub in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_map(fn, sub) for sub in tree)
    return fn(tree)


def _leaves(tree: Any, prefix: str) -> list[tuple[str, np.ndarray]]:
    if isinstance(tree, dict):
        return [item for key, sub in tree.items() for item in _leaves(sub, f"{prefix}/{key}")]
    if isinstance(tree, tuple):
        return [item for index, sub in enumerate(tree) for item in _leaves(sub, f"{prefix}/{index}")]
    return [(prefix, tree)]


def _numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


class MultiAgentReplayBuffer:
    """Uniform replay of joint transitions for every agent of a PettingZoo env.

    Args:
        max_size: Capacity in joint transitions (sub-env steps); the oldest are overwritten.
        observation_spaces: Each agent's observation space (Box, Discrete, MultiDiscrete,
            MultiBinary, Dict, Tuple).
        action_spaces: Each agent's action space.
        device: Where sampled batches are put.
    """

    fields = ("obs", "action", "reward", "next_obs", "done", "mask")

    def __init__(self, max_size: int, observation_spaces: Mapping[str, spaces.Space],
                 action_spaces: Mapping[str, spaces.Space], device: str | torch.device = "cpu") -> None:
        if isinstance(max_size, bool) or int(max_size) < 1:
            raise ValueError(f"max_size must be a positive integer, got {max_size!r}")
        if set(observation_spaces) != set(action_spaces):
            raise ValueError("observation and action spaces name different agents")
        self.max_size = int(max_size)
        self.agents = list(observation_spaces)
        self.observation_spaces = dict(observation_spaces)
        self.action_spaces = dict(action_spaces)
        self.device = torch.device(device)
        scalar = _Leaf((), np.dtype(np.float32))
        layouts = {"obs": {a: _layout(self.observation_spaces[a]) for a in self.agents},
                   "action": {a: _layout(self.action_spaces[a]) for a in self.agents},
                   "reward": dict.fromkeys(self.agents, scalar), "done": dict.fromkeys(self.agents, scalar),
                   "mask": dict.fromkeys(self.agents, scalar)}
        layouts["next_obs"] = layouts["obs"]
        row_bytes = sum(spec_row_bytes(layouts[name][agent]) for name in self.fields for agent in self.agents)
        check_fits(self.max_size * row_bytes, self.max_size, "multi-agent replay buffer")
        self._storage: dict[str, dict[str, Nested]] = {
            name: {agent: _allocate(layouts[name][agent], self.max_size) for agent in self.agents}
            for name in self.fields}
        self.ptr = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    # ------------------------------------------------------------------ writing
    def add(self, obs: Mapping[str, Any], action: Mapping[str, Any], reward: Mapping[str, Any],
            next_obs: Mapping[str, Any], done: Mapping[str, Any], valid: Mapping[str, Any]) -> int:
        """Store one vector step: per agent ``[rows, ...]`` arrays for every sub-env (``done``:
        terminations; ``valid``: the agent's transition is real). Rows where no agent is valid are
        skipped. Returns the number of rows stored."""
        masks = {agent: _numpy(valid[agent]).astype(bool).reshape(-1) for agent in self.agents}
        keep = np.flatnonzero(np.any(np.stack(list(masks.values())), axis=0))
        if keep.size == 0:
            return 0
        if keep.size > self.max_size:
            keep = keep[-self.max_size:]
        slots = (self.ptr + np.arange(keep.size)) % self.max_size
        data = {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs, "done": done, "mask": masks}
        for name in self.fields:
            for agent in self.agents:
                def put(leaf: np.ndarray, value: Any) -> None:
                    rows = _numpy(value)
                    leaf[slots] = rows.reshape(rows.shape[0], *leaf.shape[1:])[keep]
                _map2(put, self._storage[name][agent], data[name][agent])
        self.ptr = int((self.ptr + keep.size) % self.max_size)
        self._size = min(self._size + int(keep.size), self.max_size)
        return int(keep.size)

    # ------------------------------------------------------------------ reading
    def sample_indices(self, batch_size: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """Uniform storage indices with replacement (int64), drawn from `rng`."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty buffer")
        return (rng if rng is not None else np.random.default_rng()).integers(0, self._size, size=batch_size,
                                                                              dtype=np.int64)

    def sample(self, batch_size: int, rng: np.random.Generator | None = None) -> MultiAgentBatch:
        """``batch_size`` joint transitions drawn uniformly with `rng`, laid out ``[B, ...]``."""
        indices = self.sample_indices(batch_size, rng)
        batch = self._gather(indices, (indices.size,))
        batch.weights = torch.full((indices.size,), 1.0 / indices.size, device=self.device)
        batch.indices = [indices]
        return batch

    def sample_population(self, members: Sequence[Any], active: Sequence[bool]) -> MultiAgentBatch:
        """One batch per active member (``member.batch_size`` rows drawn with ``member.rng``, as
        :meth:`sample` draws them), laid out ``[P, max_batch, ...]``: padding repeats a valid row
        with weight 0; idle members have zero weights."""
        draws = [self.sample_indices(member.batch_size, member.rng) if on else np.zeros(0, dtype=np.int64)
                 for member, on in zip(members, active, strict=True)]
        padded, weights = pad_index_batches(draws)
        batch = self._gather(padded.reshape(-1), padded.shape)
        batch.weights = torch.as_tensor(weights, device=self.device)
        batch.indices = draws
        return batch

    def _gather(self, indices: np.ndarray, shape: tuple[int, ...]) -> MultiAgentBatch:
        def take(leaf: np.ndarray) -> torch.Tensor:
            rows = leaf[indices]
            return torch.as_tensor(rows.reshape(*shape, *leaf.shape[1:]), device=self.device)

        def part(name: str) -> dict[str, Any]:
            return {agent: _map(take, self._storage[name][agent]) for agent in self.agents}

        return MultiAgentBatch(part("obs"), part("action"), part("reward"), part("next_obs"), part("done"),
                               part("mask"), weights=torch.zeros(0))

    def clear(self) -> None:
        """Forget every stored transition (storage stays allocated)."""
        self.ptr = 0
        self._size = 0

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Plain state: ints and copies of the filled rows of every array (keys ``field/agent[/leaf]``)."""
        state: dict[str, Any] = {"max_size": self.max_size, "ptr": self.ptr, "size": self._size}
        for name in self.fields:
            for agent in self.agents:
                for path, leaf in _leaves(self._storage[name][agent], f"{name}/{agent}"):
                    state[f"storage/{path}"] = leaf[:self._size].copy()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (same agents, spaces and ``max_size``)."""
        if int(state["max_size"]) != self.max_size:
            raise ValueError(f"max_size mismatch: checkpoint {int(state['max_size'])} vs buffer {self.max_size}")
        size = int(state["size"])
        for name in self.fields:
            for agent in self.agents:
                for path, leaf in _leaves(self._storage[name][agent], f"{name}/{agent}"):
                    saved = _numpy(state[f"storage/{path}"])
                    if saved.shape != (size, *leaf.shape[1:]):
                        raise ValueError(f"shape mismatch for {path}: {saved.shape}")
                    leaf[:size] = saved
        self._size = size
        self.ptr = int(state["ptr"])
