"""Turn (batched) numpy observations into the float tensors the networks take."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

Observation = torch.Tensor | dict[Any, "Observation"] | tuple["Observation", ...]
"""A preprocessed observation: a tensor, or a dict/tuple of them for Dict/Tuple spaces."""


def _as_tensor(obs: Any, device: torch.device | str | None) -> torch.Tensor:
    if isinstance(obs, torch.Tensor):
        return obs.to(device) if device is not None else obs
    return torch.as_tensor(np.asarray(obs), device=device)


def _batched(tensor: torch.Tensor, ndim: int) -> torch.Tensor:
    """Add a batch dimension to a single (unbatched) observation."""
    return tensor.unsqueeze(0) if tensor.dim() == ndim else tensor


def preprocess_observation(
    space: spaces.Space,
    obs: Any,
    device: torch.device | str | None = None,
    normalize_images: bool = True,
) -> Observation:
    """Float tensors for `obs` of `space`, with a leading batch dimension.

    Box -> float (uint8 images of 2 or more dims divided by 255 when `normalize_images`);
    Discrete -> one-hot ``[B, n]`` (from ``[B]`` or ``[B, 1]`` indices); MultiDiscrete and
    MultiBinary -> float vectors; Dict -> dict of tensors; Tuple -> tuple of tensors. A single
    unbatched observation gets a batch dimension of 1.
    """
    if isinstance(space, spaces.Dict):
        return {key: preprocess_observation(sub, obs[key], device, normalize_images) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(preprocess_observation(sub, part, device, normalize_images)
                     for sub, part in zip(space.spaces, obs, strict=True))
    if not isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        raise ValueError(f"cannot preprocess observations of space {space}")
    tensor = _as_tensor(obs, device)
    if isinstance(space, spaces.Discrete):
        if tensor.dim() == 0:
            tensor = tensor.unsqueeze(0)
        elif tensor.dim() == 2 and tensor.shape[-1] == 1:
            tensor = tensor.squeeze(-1)
        index = tensor.long() - int(space.start)
        return F.one_hot(index, int(space.n)).float()
    if isinstance(space, spaces.Box):
        scale = normalize_images and space.dtype == np.uint8 and len(space.shape) >= 2
        tensor = tensor.float() / 255.0 if scale else tensor.float()
        return _batched(tensor, len(space.shape))
    return _batched(tensor.float(), len(space.shape))


def preprocess_tensor_observation(space: spaces.Space, obs: Any, device: torch.device | str | None = None,
                                  normalize_images: bool = True) -> torch.Tensor:
    """:func:`preprocess_observation` for a space whose observations are one array (not Dict or
    Tuple): the float tensor itself."""
    tensor = preprocess_observation(space, obs, device, normalize_images)
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"observations of space {space} are not a single tensor")
    return tensor


def preprocess_population_observation(space: spaces.Space, obs: Any, device: torch.device | str | None = None,
                                      normalize_images: bool = True) -> Observation:
    """:func:`preprocess_observation` for observations laid out ``[P, rows, ...]`` (a leading member
    axis; Dict and Tuple observations hold such arrays): the same tensors, ``[P, rows, ...]``."""
    if type(space) is spaces.Box and not (normalize_images and space.dtype == np.uint8 and len(space.shape) >= 2):
        return _as_tensor(obs, device).float()  # floats as they are: nothing to flatten and restore
    def leading(field: Any) -> tuple[int, int]:
        if isinstance(field, Mapping):
            return leading(next(iter(field.values())))
        if isinstance(field, tuple):
            return leading(field[0])
        return tuple(field.shape[:2])

    def flat(field: Any) -> Any:
        if isinstance(field, Mapping):
            return {key: flat(value) for key, value in field.items()}
        if isinstance(field, tuple):
            return tuple(flat(value) for value in field)
        return _as_tensor(field, device).flatten(0, 1)

    def restore(field: Any, shape: tuple[int, int]) -> Any:
        if isinstance(field, dict):
            return {key: restore(value, shape) for key, value in field.items()}
        if isinstance(field, tuple):
            return tuple(restore(value, shape) for value in field)
        return field.unflatten(0, shape)

    shape = leading(obs if isinstance(obs, Mapping | tuple) else _as_tensor(obs, device))
    return restore(preprocess_observation(space, flat(obs), device, normalize_images), shape)
