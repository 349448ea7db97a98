"""Compact number and duration formatting shared by the console helpers."""

from __future__ import annotations

import math


def format_number(value: float | int | None) -> str:
    """Format a number compactly: ``42``, ``0.9731``, ``1234``, ``3.2e-04``, ``1.5e+07``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value) if abs(value) < 1_000_000 else f"{value:.1e}"
    x = float(value)
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == 0.0:
        return "0"
    if 1e-2 <= abs(x) < 1e5:
        text = f"{x:.4g}"
        return text if "e" not in text else f"{x:.1e}"
    return f"{x:.1e}"


def format_count(value: float) -> str:
    """Format a count with a k/M/G suffix: ``950``, ``12.3k``, ``4.56M``."""
    x = float(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= limit:
            scaled = x / limit
            return f"{scaled:.3g}{suffix}" if abs(scaled) < 1000 else f"{scaled:.0f}{suffix}"
    return f"{x:.0f}" if x == int(x) or abs(x) >= 100 else f"{x:.3g}"


def format_duration(seconds: float | None) -> str:
    """Format seconds as ``MM:SS``, ``H:MM:SS`` or ``Dd HH:MM:SS``; ``--:--`` if unknown."""
    if seconds is None or math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        return "--:--"
    total = round(seconds)
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes:02d}:{secs:02d}"
