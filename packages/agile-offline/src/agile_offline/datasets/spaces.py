"""`check_spaces`: does a dataset fit the observation and action spaces of an environment?"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from agile_offline.datasets.errors import DatasetError
from agile_offline.datasets.transitions import TransitionData

__all__ = ["check_spaces", "describe_space"]


def describe_space(space: spaces.Space) -> str:
    """A short name such as ``Box(8,)``, ``Discrete(2)`` or ``Dict(image: Box(3, 8, 8), ...)``."""
    if isinstance(space, spaces.Box):
        return f"Box{space.shape}"
    if isinstance(space, spaces.Discrete):
        return f"Discrete({int(space.n)})" if int(space.start) == 0 else f"Discrete({int(space.n)}, start={int(space.start)})"
    if isinstance(space, spaces.MultiDiscrete):
        return f"MultiDiscrete({space.nvec.tolist()})"
    if isinstance(space, spaces.MultiBinary):
        return f"MultiBinary({space.n})"
    if isinstance(space, spaces.Dict):
        return "Dict(" + ", ".join(f"{key}: {describe_space(sub)}" for key, sub in space.spaces.items()) + ")"
    return type(space).__name__


def _integral(values: np.ndarray) -> bool:
    return values.dtype.kind in "biu" or bool(np.all(np.mod(values, 1) == 0))


def _range_text(values: np.ndarray) -> str:
    return f"{values.min():g}..{values.max():g}"


def _check_array(source: str, field: str, values: np.ndarray, space: spaces.Space, what: str) -> None:
    """One array ``[N, ...]`` against one (non-Dict) space; `what` names the space in messages."""
    row_shape = tuple(values.shape[1:])
    name = describe_space(space)
    if isinstance(space, spaces.Box):
        if row_shape != space.shape:
            raise DatasetError(f"{source}: {field} have shape {row_shape} per row, the env's {what} is {name}")
        return
    if isinstance(space, spaces.Discrete):
        if row_shape not in ((), (1,)):
            raise DatasetError(f"{source}: {field} have shape {row_shape} per row, the env's {what} is {name} "
                               f"(one integer per row)")
        start, n = int(space.start), int(space.n)
        if not _integral(values):
            raise DatasetError(f"{source}: {field} hold non-integer values ({values.dtype}), the env's {what} is "
                               f"{name}")
        if values.min() < start or values.max() >= start + n:
            raise DatasetError(f"{source}: {field} hold values {_range_text(values)}, the env's {what} is {name} "
                               f"(valid: {start}..{start + n - 1})")
        return
    if isinstance(space, spaces.MultiDiscrete):
        if row_shape != space.shape:
            raise DatasetError(f"{source}: {field} have shape {row_shape} per row, the env's {what} is {name}")
        low, high = np.asarray(space.start), np.asarray(space.start) + space.nvec
        if not _integral(values) or np.any(values < low) or np.any(values >= high):
            raise DatasetError(f"{source}: {field} hold values {_range_text(values)} outside the env's {what} "
                               f"{name}")
        return
    if isinstance(space, spaces.MultiBinary):
        if row_shape != space.shape:
            raise DatasetError(f"{source}: {field} have shape {row_shape} per row, the env's {what} is {name}")
        if not np.isin(values, (0, 1)).all():
            raise DatasetError(f"{source}: {field} hold values other than 0/1, the env's {what} is {name}")
        return
    raise DatasetError(f"{source}: the env's {what} {name} is not supported by offline datasets "
                       f"(Box, Discrete, MultiDiscrete, MultiBinary, or a Dict of them)")


def _check_observations(source: str, field: str, values: Any, space: spaces.Space) -> None:
    if isinstance(space, spaces.Dict):
        if not isinstance(values, dict):
            raise DatasetError(f"{source}: {field} are one array of shape {tuple(values.shape[1:])} per row, the "
                               f"env's observation space is {describe_space(space)} (one array per key)")
        if set(values) != set(space.spaces):
            raise DatasetError(f"{source}: {field} have keys {sorted(values)}, the env's observation space has "
                               f"keys {sorted(space.spaces)}")
        for key, sub in space.spaces.items():
            _check_array(source, f"{field}/{key}", values[key], sub, f"observation space[{key!r}]")
        return
    if isinstance(values, dict):
        raise DatasetError(f"{source}: {field} are a group with keys {sorted(values)}, the env's observation "
                           f"space is {describe_space(space)}")
    _check_array(source, field, values, space, "observation space")


def check_spaces(data: TransitionData, observation_space: spaces.Space, action_space: spaces.Space,
                 source: str) -> None:
    """Raise `DatasetError` (naming `source`, the field and both shapes) when the observations or
    actions of `data` do not fit the environment's spaces: Box shapes per row, Dict keys and
    per-key shapes, Discrete/MultiDiscrete integer ranges, MultiBinary 0/1 values."""
    _check_observations(source, "observations", data.observations, observation_space)
    _check_observations(source, "next_observations", data.next_observations, observation_space)
    if isinstance(action_space, spaces.Dict | spaces.Tuple):
        raise DatasetError(f"{source}: the env's action space {describe_space(action_space)} is not supported by "
                           f"offline datasets")
    _check_array(source, "actions", data.actions, action_space, "action space")
