"""Facts about gymnasium spaces that network construction and preprocessing need."""

from __future__ import annotations

import math

from gymnasium import spaces

VECTOR_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""Spaces whose observations become one flat float vector (Box of any shape, flattened)."""
COMPOSITE_SPACES = (spaces.Dict, spaces.Tuple)
"""Spaces encoded by the multi-input encoder."""


def is_image_space(space: spaces.Space) -> bool:
    """A 3-D (channels-first) Box: encoded by a CNN unless told otherwise."""
    return isinstance(space, spaces.Box) and len(space.shape) == 3


def feature_shape(space: spaces.Space) -> tuple[int, ...]:
    """Shape of one preprocessed observation (no batch dim): Discrete is one-hot ``(n,)``."""
    if isinstance(space, spaces.Discrete):
        return (int(space.n),)
    if isinstance(space, spaces.MultiDiscrete):
        return tuple(int(d) for d in space.nvec.shape)
    if isinstance(space, (spaces.Box, spaces.MultiBinary)):
        return tuple(int(d) for d in space.shape)
    raise ValueError(f"observation space {space} has no flat feature vector")


def flat_dim(space: spaces.Space) -> int:
    """Number of floats in one preprocessed observation of a vector space."""
    return math.prod(feature_shape(space))


def action_dim(space: spaces.Space) -> int:
    """Number of floats describing one action of a Box space (its flattened size)."""
    if not isinstance(space, spaces.Box):
        raise ValueError(f"expected a Box action space, got {space}")
    return math.prod(space.shape)
