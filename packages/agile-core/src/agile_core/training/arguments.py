"""Checks of the schedule arguments every training function takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agile_core.distributed.data_parallel import check_accelerator

__all__ = ["check_accelerator", "check_arguments", "positive_int"]


def positive_int(name: str, value: Any) -> int:
    """`value` as an int, or a ValueError naming `name` when it is not an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def check_arguments(pop: Sequence[Any], *, max_steps: Any, evo_steps: Any, eval_loop: Any, eval_steps: Any,
                    accelerator: Any, loop_name: str) -> tuple[int, int, int, int | None]:
    """``(max_steps, evo_steps, eval_loop, eval_steps)`` as positive integers (eval_steps may be
    None), or a ValueError naming the argument; a population is required, and an `accelerator`
    must look like an ``accelerate.Accelerator``."""
    if not pop:
        raise ValueError("pop must contain at least one agent")
    check_accelerator(accelerator, loop_name)
    checked = [positive_int(name, value) for name, value in
               (("max_steps", max_steps), ("evo_steps", evo_steps), ("eval_loop", eval_loop))]
    steps = None if eval_steps is None else positive_int("eval_steps", eval_steps)
    return checked[0], checked[1], checked[2], steps
