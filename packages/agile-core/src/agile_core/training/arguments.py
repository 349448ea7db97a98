"""Checks of the schedule arguments every training function takes (applied once, by
:class:`~agile_core.training.options.RunOptions`)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["positive_int"]


def positive_int(name: str, value: Any) -> int:
    """`value` as an int, or a ValueError naming `name` when it is not an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)
