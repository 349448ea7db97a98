"""Storage layout helpers for gymnasium spaces.

A space is mapped to a *spec tree*: a :class:`LeafSpec` (row shape and dtype) for
flat spaces, a ``dict`` of specs for :class:`~gymnasium.spaces.Dict` and a ``tuple``
of specs for :class:`~gymnasium.spaces.Tuple`. Storage, batches and samples use the
same nesting with one contiguous array (or tensor) per leaf, so no per-transition
Python object is ever created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import torch
from gymnasium import spaces

__all__ = [
    "LeafSpec",
    "Nested",
    "Spec",
    "allocate",
    "as_rows",
    "gather",
    "iter_leaves",
    "map_nested",
    "nested_nbytes",
    "select_rows",
    "space_spec",
    "to_numpy",
    "to_torch",
    "write",
]


@dataclass(frozen=True)
class LeafSpec:
    """Shape of one stored row of a leaf and the dtype it is stored with."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]


Spec: TypeAlias = LeafSpec | dict[str, "Spec"] | tuple["Spec", ...]
Nested: TypeAlias = Any  # an array/tensor, or a dict/tuple nesting of them


def space_spec(space: spaces.Space[Any], float_dtype: np.dtype[Any] | None = None) -> Spec:
    """Return the storage spec tree of ``space``.

    Box leaves keep their dtype (``uint8`` images stay ``uint8``) unless they are
    floating point and ``float_dtype`` is given. Discrete and MultiDiscrete are
    stored as ``int64`` (ready for indexing/gather in torch), MultiBinary as ``int8``.
    """
    if isinstance(space, spaces.Box):
        dtype = np.dtype(space.dtype)
        if float_dtype is not None and np.issubdtype(dtype, np.floating):
            dtype = np.dtype(float_dtype)
        return LeafSpec(tuple(space.shape), dtype)
    if isinstance(space, spaces.Discrete):
        return LeafSpec((), np.dtype(np.int64))
    if isinstance(space, spaces.MultiDiscrete):
        return LeafSpec(tuple(space.nvec.shape), np.dtype(np.int64))
    if isinstance(space, spaces.MultiBinary):
        return LeafSpec(tuple(space.shape), np.dtype(np.int8))
    if isinstance(space, spaces.Dict):
        return {key: space_spec(sub, float_dtype) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(space_spec(sub, float_dtype) for sub in space.spaces)
    raise TypeError(f"unsupported space for replay storage: {space!r}")


def map_nested(fn: Callable[..., Any], tree: Nested, *others: Nested) -> Nested:
    """Apply ``fn`` leaf-wise over ``tree`` (and parallel trees ``others``)."""
    if isinstance(tree, dict):
        return {k: map_nested(fn, tree[k], *(o[k] for o in others)) for k in tree}
    if isinstance(tree, tuple):
        return tuple(map_nested(fn, t, *(o[i] for o in others)) for i, t in enumerate(tree))
    return fn(tree, *others)


def iter_leaves(tree: Nested, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(path, leaf)`` pairs; paths join dict keys / tuple positions with ``/``."""
    if isinstance(tree, dict):
        for key, sub in tree.items():
            yield from iter_leaves(sub, f"{prefix}/{key}" if prefix else str(key))
    elif isinstance(tree, tuple):
        for i, sub in enumerate(tree):
            yield from iter_leaves(sub, f"{prefix}/{i}" if prefix else str(i))
    else:
        yield prefix, tree


def spec_row_bytes(spec: Spec) -> int:
    """Bytes one row of `spec` (leaves with ``shape`` and ``dtype``, nested in dicts and tuples)
    takes once allocated."""
    if isinstance(spec, dict):
        return sum(spec_row_bytes(item) for item in spec.values())
    if isinstance(spec, tuple):
        return sum(spec_row_bytes(item) for item in spec)
    return int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize


def allocate(spec: Spec, leading: tuple[int, ...]) -> Nested:
    """Allocate zeroed contiguous storage with ``leading`` dims before each row shape."""
    return map_nested(lambda leaf: np.zeros(leading + leaf.shape, dtype=leaf.dtype), spec)


def to_numpy(x: Any) -> np.ndarray:
    """Convert an array-like (including a torch tensor on any device) to numpy without copying when possible."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def as_rows(spec: Spec, data: Nested, n: int) -> Nested:
    """View ``data`` as numpy arrays of shape ``[n, *row_shape]`` following ``spec``.

    Accepts e.g. Discrete actions as ``[n]`` or ``[n, 1]``. No dtype conversion is done
    here; the assignment into storage casts.
    """
    if isinstance(spec, dict):
        return {k: as_rows(sub, data[k], n) for k, sub in spec.items()}
    if isinstance(spec, tuple):
        return tuple(as_rows(sub, data[i], n) for i, sub in enumerate(spec))
    arr = to_numpy(data)
    shape = (n, *spec.shape)
    return arr if arr.shape == shape else arr.reshape(shape)


def select_rows(data: Nested, rows: Any) -> Nested:
    """Select rows (boolean mask or index array) of every leaf of ``data``."""
    return map_nested(lambda a: a[rows], data)


def write(storage: Nested, index: Any, data: Nested) -> None:
    """Assign ``data`` into ``storage[index]`` leaf-wise (casting to the storage dtype)."""
    if isinstance(storage, dict):
        for key, sub in storage.items():
            write(sub, index, data[key])
    elif isinstance(storage, tuple):
        for i, sub in enumerate(storage):
            write(sub, index, data[i])
    else:
        storage[index] = data


def gather(storage: Nested, index: Any) -> Nested:
    """Return ``storage[index]`` leaf-wise; a 1-D integer index uses ``np.take`` (one copy)."""
    if isinstance(index, np.ndarray) and index.ndim == 1 and index.dtype.kind in "iu":
        if isinstance(storage, np.ndarray):
            return np.take(storage, index, axis=0)
        return map_nested(lambda a: np.take(a, index, axis=0), storage)
    return map_nested(lambda a: a[index], storage)


def to_torch(data: Nested, device: torch.device) -> Nested:
    """Convert nested numpy arrays to tensors on ``device`` (zero-copy on CPU)."""

    def convert(a: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(a))
        return tensor if device.type == "cpu" else tensor.to(device)

    return convert(data) if isinstance(data, np.ndarray) else map_nested(convert, data)


def nested_nbytes(tree: Nested) -> int:
    """Total bytes held by the leaves of ``tree``."""
    return sum(int(leaf.nbytes) for _, leaf in iter_leaves(tree))
