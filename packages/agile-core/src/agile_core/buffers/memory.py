"""Will it fit? An estimate of a buffer's bytes checked against this machine's free memory before
anything is allocated, so an impossible size fails at once with a message instead of swapping
or being killed."""

from __future__ import annotations

import os

__all__ = ["BufferTooLargeError", "available_memory", "check_fits", "format_bytes"]

HEADROOM = 0.9
"""Share of the available memory a single buffer may take."""


class BufferTooLargeError(MemoryError):
    """A preallocated buffer that cannot fit in this machine's available memory."""


def available_memory() -> int | None:
    """Bytes of memory available for new allocations (Linux `MemAvailable`, else free physical
    pages); None when the platform does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def format_bytes(n: float) -> str:
    """`1.5 GB`-style size (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_fits(nbytes: int, rows: int, what: str = "replay buffer") -> None:
    """BufferTooLargeError when `nbytes` (for `rows` rows) exceeds the available memory's headroom."""
    available = available_memory()
    if available is None or nbytes <= HEADROOM * available:
        return
    per_row = nbytes / max(rows, 1)
    fitting = int(HEADROOM * available / per_row) if per_row else rows
    raise BufferTooLargeError(
        f"a {what} of {rows:,} rows needs {format_bytes(nbytes)} ({format_bytes(per_row)} per row), but this "
        f"machine has {format_bytes(available)} available; at most about {fitting:,} rows fit")
