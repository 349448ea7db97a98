"""A small stderr progress bar over global steps (steps/s and ETA), without tqdm.

On a terminal the bar redraws in place at most ``1 / min_interval`` times per
second.  When stderr is not a terminal (CI, log files) the bar is disabled; with
``verbose=True`` a plain one-line status is printed instead, at most every
``status_interval`` seconds.  The per-generation table printer lives in
:mod:`.table` and is re-exported here.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Literal, TextIO

from ._format import format_count, format_duration
from .table import GenerationRow, format_generation_table, print_generation_table

__all__ = ["GenerationRow", "ProgressBar", "format_generation_table", "print_generation_table"]

Mode = Literal["bar", "status", "off"]


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):
        return False


class ProgressBar:
    """Progress over ``total`` global steps, written to ``stream`` (default stderr).

    ``enabled=None`` picks the mode automatically: a redrawing bar on a TTY,
    otherwise a periodic plain status line if ``verbose`` else nothing.
    ``enabled=False`` disables all output; ``enabled=True`` forces the bar.
    ``initial`` is the step the run starts (or resumes) at; speed and ETA are
    measured from there.  ``unit`` names what is counted (``steps``, ``episodes``...).
    ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        total: int,
        *,
        desc: str = "",
        initial: int = 0,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        verbose: bool = False,
        min_interval: float = 0.2,
        status_interval: float = 30.0,
        unit: str = "steps",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(int(total), 0)
        self.desc = desc
        self.unit = unit
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.min_interval = min_interval
        self.status_interval = status_interval
        self._clock = clock
        self._start_step = self.n = int(initial)
        self._start_time = clock()
        self._last_draw = -float("inf")
        self._last_status = self._start_time
        self._closed = False
        self.mode: Mode
        if enabled is False:
            self.mode = "off"
        elif enabled is True or _is_tty(self.stream):
            self.mode = "bar"
        else:
            self.mode = "status" if verbose else "off"

    @property
    def enabled(self) -> bool:
        """Whether anything is written at all."""
        return self.mode != "off"

    def rate(self) -> float:
        """Steps per second since the bar started (0 before any progress)."""
        elapsed = self._clock() - self._start_time
        done = self.n - self._start_step
        return done / elapsed if elapsed > 0 and done > 0 else 0.0

    def eta(self) -> float | None:
        """Estimated seconds left, or ``None`` while the speed is unknown."""
        rate = self.rate()
        return max(self.total - self.n, 0) / rate if rate > 0 else None

    def update(self, n: int = 1) -> None:
        """Advance by ``n`` steps."""
        self.set(self.n + n)

    def set(self, step: int) -> None:
        """Move to the absolute global ``step`` and redraw if enough time has passed."""
        self.n = int(step)
        if self._closed or self.mode == "off":
            return
        now = self._clock()
        if self.mode == "bar":
            if now - self._last_draw >= self.min_interval or self.n >= self.total:
                self._last_draw = now
                self._draw_bar()
        elif now - self._last_status >= self.status_interval:
            self._last_status = now
            self._write(self.status_line() + "\n")

    def status_line(self) -> str:
        """Plain status: ``desc 1.2k/10k steps (12.0%) | 950 steps/s | ETA 00:09``."""
        percent = f" ({100.0 * self.n / self.total:.1f}%)" if self.total else ""
        prefix = f"{self.desc} " if self.desc else ""
        return (
            f"{prefix}{format_count(self.n)}/{format_count(self.total)} {self.unit}{percent}"
            f" | {format_count(self.rate())} {self.unit}/s | ETA {format_duration(self.eta())}"
        )

    def bar_line(self, width: int | None = None) -> str:
        """One line with a bar sized to ``width`` columns (default: terminal width)."""
        columns = width if width is not None else shutil.get_terminal_size((80, 24)).columns
        prefix = f"{self.desc}: " if self.desc else ""
        frac = min(self.n / self.total, 1.0) if self.total else 0.0
        suffix = (
            f" {100 * frac:3.0f}% {format_count(self.n)}/{format_count(self.total)}"
            f" [{format_count(self.rate())} {self.unit}/s, ETA {format_duration(self.eta())}]"
        )
        room = columns - len(prefix) - len(suffix) - 3
        if room < 5:
            return (prefix + suffix.strip())[: max(columns - 1, 1)]
        filled = int(frac * room)
        return f"{prefix}|{'█' * filled}{' ' * (room - filled)}|{suffix}"

    def _draw_bar(self) -> None:
        self._write("\r" + self.bar_line() + "\x1b[K")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (ValueError, OSError):
            self.mode = "off"

    def close(self) -> None:
        """Draw the final state and end the line (idempotent)."""
        if self._closed:
            return
        if self.mode == "bar":
            self._draw_bar()
            self._write("\n")
        elif self.mode == "status":
            self._write(self.status_line() + "\n")
        self._closed = True

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
