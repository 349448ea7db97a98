"""Activation functions by name (the torch.nn class names a manifest may use)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

ACTIVATION_NAMES: tuple[str, ...] = (
    "ReLU", "Tanh", "GELU", "ELU", "LeakyReLU", "Sigmoid", "Softplus", "Softmax", "PReLU", "Identity",
)
"""Every activation an evolvable network can be built with."""

MUTATION_ACTIVATIONS: tuple[str, ...] = ("ReLU", "ELU", "GELU", "Tanh", "LeakyReLU")
"""Activations `change_activation` samples from when none is given (well-behaved hidden ones)."""


def check_activation(name: str | None, allow_none: bool = False) -> None:
    """Raise a ValueError naming the choices when `name` is not a known activation."""
    if name is None and allow_none:
        return
    if name not in ACTIVATION_NAMES:
        raise ValueError(f"unknown activation {name!r}; choose one of {list(ACTIVATION_NAMES)}")


def make_activation(
    name: str | None,
    *,
    softmax_dim: int = -1,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> nn.Module:
    """A fresh activation module (`None` gives the identity); PReLU is created on device/dtype."""
    if name is None or name == "Identity":
        return nn.Identity()
    check_activation(name)
    if name == "Softmax":
        return nn.Softmax(dim=softmax_dim)
    if name == "PReLU":
        return nn.PReLU(device=device, dtype=dtype)
    module: nn.Module = getattr(nn, name)()
    return module


def sample_activation(current: str, rng: np.random.Generator) -> str:
    """A mutation activation different from `current`, drawn uniformly."""
    choices = [name for name in MUTATION_ACTIVATIONS if name != current]
    return str(choices[int(rng.integers(len(choices)))])
