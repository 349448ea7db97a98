"""Nested, preallocated tensor storage for gymnasium spaces.

A space is stored as a *tensor tree*: one tensor per leaf space, nested in a ``dict``
for :class:`~gymnasium.spaces.Dict` and a ``tuple`` for :class:`~gymnasium.spaces.Tuple`.
Every leaf tensor has the same leading dimensions (``[num_steps, num_envs]`` in a
rollout buffer) followed by the shape of one element of the space.

Leaf dtypes:

* ``Box``: floating point boxes are stored as ``float32``; integer and boolean boxes
  keep their dtype (``uint8`` images stay ``uint8``).
* ``Discrete``: ``int64`` with no trailing dimension (ready for ``gather``/embedding).
* ``MultiDiscrete``: ``int64`` with the shape of ``nvec``.
* ``MultiBinary``: ``float32`` (ready for network input and ``Bernoulli.log_prob``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import torch
from gymnasium import spaces

__all__ = [
    "TensorTree",
    "allocate",
    "as_tensor",
    "leaf_dtype",
    "leaf_shape",
    "map_tree",
    "write_row",
]

# A torch.Tensor, or a dict/tuple nesting of them (typed loosely so that callers can
# index ``batch.obs["image"]`` without narrowing a recursive union).
TensorTree: TypeAlias = Any


def leaf_dtype(space: spaces.Space[Any]) -> torch.dtype:
    """Return the torch dtype a leaf (non-composite) space is stored with."""
    if isinstance(space, spaces.Box):
        np_dtype = np.dtype(space.dtype)
        if np.issubdtype(np_dtype, np.floating):
            return torch.float32
        return torch.from_numpy(np.zeros(0, dtype=np_dtype)).dtype
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
        return torch.int64
    if isinstance(space, spaces.MultiBinary):
        return torch.float32
    raise TypeError(f"unsupported leaf space for rollout storage: {space!r}")


def leaf_shape(space: spaces.Space[Any]) -> tuple[int, ...]:
    """Return the shape of one element of a leaf space (``()`` for Discrete)."""
    if isinstance(space, spaces.Discrete):
        return ()
    if isinstance(space, spaces.MultiDiscrete):
        return tuple(int(d) for d in space.nvec.shape)
    if isinstance(space, spaces.Box | spaces.MultiBinary):
        return tuple(int(d) for d in space.shape)
    raise TypeError(f"unsupported leaf space for rollout storage: {space!r}")


def allocate(
    space: spaces.Space[Any], leading: tuple[int, ...], device: torch.device
) -> TensorTree:
    """Allocate zero-filled storage for ``space`` with the given leading dimensions."""
    if isinstance(space, spaces.Dict):
        return {key: allocate(sub, leading, device) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(allocate(sub, leading, device) for sub in space.spaces)
    return torch.zeros(leading + leaf_shape(space), dtype=leaf_dtype(space), device=device)


def map_tree(fn: Callable[..., torch.Tensor], tree: TensorTree, *others: Any) -> TensorTree:
    """Apply ``fn`` leaf-wise over ``tree`` and structurally parallel trees ``others``."""
    if isinstance(tree, dict):
        return {key: map_tree(fn, tree[key], *(_child(o, key) for o in others)) for key in tree}
    if isinstance(tree, tuple):
        return tuple(
            map_tree(fn, sub, *(_child(o, i) for o in others)) for i, sub in enumerate(tree)
        )
    return fn(tree, *others)


def _child(tree: Any, key: str | int) -> Any:
    """Return ``tree[key]`` with a clear error when the structure does not match."""
    try:
        return tree[key]
    except (KeyError, IndexError, TypeError) as err:
        raise ValueError(f"value does not match the storage structure at key {key!r}") from err


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def as_tensor(value: Any, like: torch.Tensor, name: str) -> torch.Tensor:
    """Convert ``value`` (tensor, array, list or scalar) to the dtype, device and shape of ``like``.

    Tensors are detached, so storing a policy output never keeps its graph alive.
    The shape must equal ``like.shape`` up to dimensions of size one (so a ``[N, 1]``
    critic output fits a ``[N]`` slot); anything else raises :class:`ValueError`.
    """
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        value = value.copy()
    tensor = torch.as_tensor(value).detach()
    if tensor.shape != like.shape:
        if _squeezed(tuple(tensor.shape)) != _squeezed(tuple(like.shape)):
            raise ValueError(
                f"{name}: expected shape {tuple(like.shape)}, got {tuple(tensor.shape)}"
            )
        tensor = tensor.reshape(like.shape)
    return tensor.to(device=like.device, dtype=like.dtype)


def write_row(store: TensorTree, row: int | slice, value: Any, name: str) -> None:
    """Copy ``value`` (same nesting as ``store``) into ``store[row]`` in place."""

    def _write(leaf: torch.Tensor, val: Any) -> torch.Tensor:
        slot = leaf[row]
        slot.copy_(as_tensor(val, slot, name))
        return leaf

    map_tree(_write, store, value)
