"""Nested, preallocated tensor storage for gymnasium spaces: it lives in
:mod:`agile_core.training.tensor_tree` (shared with agile-marl); re-exported here."""

from agile_core.training.tensor_tree import (
    TensorTree,
    allocate,
    as_tensor,
    leaf_dtype,
    leaf_shape,
    map_tree,
    write_row,
)

__all__ = [
    "TensorTree",
    "allocate",
    "as_tensor",
    "leaf_dtype",
    "leaf_shape",
    "map_tree",
    "write_row",
]
