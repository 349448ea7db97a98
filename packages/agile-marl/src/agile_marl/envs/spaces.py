"""Batched arrays for Gymnasium spaces: observation buffers, env actions from rows, mask shapes."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

Batched = Any
"""An ``np.ndarray [n, *shape]``, or a dict / tuple of them for Dict / Tuple spaces."""


def obs_buffer(space: spaces.Space, n: int) -> Batched:
    """Zeros ``[n, *shape]`` float32 for `space` (a dict / tuple of them for Dict / Tuple spaces)."""
    if isinstance(space, spaces.Dict):
        return {key: obs_buffer(sub, n) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(obs_buffer(sub, n) for sub in space.spaces)
    if isinstance(space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
        return np.zeros((n, *(space.shape or ())), dtype=np.float32)
    raise NotImplementedError(f"observation space {space} is not supported (Box, Discrete, MultiDiscrete, "
                              "MultiBinary, Dict, Tuple)")


def write_row(buffer: Batched, row: int, value: Any) -> None:
    """Write one observation into row `row` of `buffer`."""
    if isinstance(buffer, dict):
        for key, sub in buffer.items():
            write_row(sub, row, value[key])
    elif isinstance(buffer, tuple):
        for index, sub in enumerate(buffer):
            write_row(sub, row, value[index])
    else:
        buffer[row] = value


def zero_row(buffer: Batched, row: int) -> None:
    """Zero row `row` of `buffer`."""
    if isinstance(buffer, dict):
        for sub in buffer.values():
            zero_row(sub, row)
    elif isinstance(buffer, tuple):
        for sub in buffer:
            zero_row(sub, row)
    else:
        buffer[row] = 0


def assign_rows(buffer: Batched, rows: slice, values: Batched) -> None:
    """``buffer[rows] = values`` leaf by leaf."""
    if isinstance(buffer, dict):
        for key, sub in buffer.items():
            assign_rows(sub, rows, values[key])
    elif isinstance(buffer, tuple):
        for sub, value in zip(buffer, values, strict=True):
            assign_rows(sub, rows, value)
    else:
        buffer[rows] = values


def copy_batched(buffer: Batched) -> Batched:
    """A copy of `buffer` leaf by leaf."""
    if isinstance(buffer, dict):
        return {key: copy_batched(sub) for key, sub in buffer.items()}
    if isinstance(buffer, tuple):
        return tuple(copy_batched(sub) for sub in buffer)
    return buffer.copy()


def check_action_space(space: spaces.Space, agent: str) -> None:
    """Raise NotImplementedError for action spaces the vector env cannot batch."""
    if not isinstance(space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
        raise NotImplementedError(f"agent {agent!r}: action space {space} is not supported "
                                  "(Box, Discrete, MultiDiscrete, MultiBinary)")


def action_rows(space: spaces.Space, actions: Any, n: int, agent: str) -> np.ndarray:
    """Actions of one agent as an array ``[n, *shape]`` (``[n, 1]`` Discrete actions squeezed)."""
    array = np.asarray(actions)
    if isinstance(space, spaces.Discrete) and array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    expected = (n, *(space.shape or ()))
    if array.shape != expected:
        raise ValueError(f"actions[{agent!r}] has shape {array.shape}, expected {expected} ([num_envs, *action_shape])")
    return array


def env_action(space: spaces.Space, row: Any) -> Any:
    """One sub-env's action from a row of `action_rows`: an int for Discrete, else a fresh array."""
    if isinstance(space, spaces.Discrete):
        return int(row)
    if isinstance(space, spaces.MultiDiscrete):
        return np.array(row, dtype=np.int64)
    if isinstance(space, spaces.MultiBinary):
        return np.array(row, dtype=np.int8)
    return np.array(row, dtype=space.dtype)


def mask_shape(space: spaces.Space) -> tuple[int, ...] | None:
    """Shape of one action mask for `space` (Discrete: ``(n,)``; MultiDiscrete: ``(sum(nvec),)``)."""
    if isinstance(space, spaces.Discrete):
        return (int(space.n),)
    if isinstance(space, spaces.MultiDiscrete):
        return (int(np.sum(space.nvec)),)
    return None


def mask_row(mask: Any) -> np.ndarray:
    """A mask from the env (array, or a tuple of arrays for MultiDiscrete) as one flat bool row."""
    if isinstance(mask, tuple | list) and mask and not np.isscalar(mask[0]):
        return np.concatenate([np.asarray(part).reshape(-1) for part in mask]).astype(bool)
    return np.asarray(mask).reshape(-1).astype(bool)
