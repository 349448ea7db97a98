"""Torch device names checked against this machine before anything is built on them."""

from __future__ import annotations

from typing import Any

__all__ = ["check_device"]


def check_device(value: Any, here: bool = True) -> str:
    """`value` (`cpu`, `cuda`, `cuda:1`, `mps`, a ``torch.device``) as a string when it names a
    device (and, with `here`, this machine has it); TypeError for a non-name, ValueError naming
    the problem otherwise. Ray workers on other machines check only the name (`here=False`)."""
    import torch

    if isinstance(value, torch.device):
        value = str(value)
    if not isinstance(value, str):
        raise TypeError(f"device must be a torch device name such as 'cpu' or 'cuda:0', got {value!r}")
    try:
        parsed = torch.device(value)
    except (RuntimeError, ValueError):
        raise ValueError(f"unknown torch device {value!r}; e.g. cpu, cuda, cuda:0, mps") from None
    if not here:
        return value
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"{value!r}: no CUDA device on this machine")
        if parsed.index is not None and parsed.index >= count:
            raise ValueError(f"{value!r}: this machine has {count} CUDA device(s)")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{value!r}: MPS is not available on this machine")
    return value
