"""argparse value types shared by agile's command lines (`agile ...`, `python -m
agile_arena.server ...`): each turns a bad value into argparse's usage error (exit 2)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["device", "finite_float", "int_in", "non_negative_float", "port", "positive_float", "positive_int"]


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def int_in(low: int, high: int) -> Callable[[str], int]:
    """The type of an integer in ``[low, high]`` (e.g. a count whose huge values would run for days)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer in {low}..{high:,}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer in {low}..{high:,}, got {value:,}")
        return value

    return parse


def finite_float(text: str) -> float:
    """A finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A number >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def port(text: str) -> int:
    """A TCP port, 0 (pick a free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {value}")
    return value


def device(text: str) -> str:
    """A torch device this machine has (`cpu`, `cuda`, `cuda:1`, `mps`...), checked when parsed,
    so a typo or a missing GPU is a usage error, not a failure deep inside training."""
    from agile_core.devices import check_device

    try:
        return check_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
