"""Where the wall time of a training run goes: a section timer the loops report into.

The loops time their parts with ``with PROFILER.env: ...`` (env stepping), ``PROFILER.act``
(choosing actions), ``PROFILER.sample`` (drawing batches), ``PROFILER.learn`` (gradient steps),
``PROFILER.evaluate``, ``PROFILER.evolve`` (selection and mutation), ``PROFILER.checkpoint``,
``PROFILER.log`` and ``PROFILER.setup`` (building the env, agents and their optimizers, with the
imports they trigger). Sections nest exclusively: the env steps and actions of an evaluation
count as ``env`` and ``act``, and ``evaluate`` keeps only the rest. Each section also counts its
calls. Everything else inside :meth:`Profiler.run` is *other* (the framework's own
bookkeeping). Disabled (the default), a section costs one attribute check. ``agile train
--profile`` enables it and prints :meth:`Profiler.table`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["PROFILER", "SECTIONS", "Profiler"]

SECTIONS: tuple[str, ...] = ("env", "act", "sample", "learn", "evaluate", "evolve", "checkpoint", "log", "setup")
"""Timed sections, in report order (``other`` is the rest of the run's wall time)."""

SECTION_HELP = {
    "env": "environment stepping and resets",
    "act": "choosing actions (network forward, exploration)",
    "sample": "drawing batches from buffers",
    "learn": "gradient steps (forward, backward, optimizer)",
    "evaluate": "greedy evaluation episodes, less their env steps and actions (counted above)",
    "evolve": "selection and mutation",
    "checkpoint": "checkpoints and elite saving",
    "log": "metrics, progress bar, tables",
    "setup": "building env, agents and optimizers (and the imports they trigger)",
    "other": "everything else (loop bookkeeping, buffers writes, Python glue)",
}


class _Section:
    """A reusable timer of *exclusive* time: while another section runs inside it (env steps
    inside an evaluation), that time goes to the inner section only, so the sections and
    ``other`` add up to the wall time. ``inclusive`` keeps the time with inner sections counted.
    Nested use of the same section counts the outer one only."""

    __slots__ = ("calls", "depth", "entered", "inclusive", "name", "owner", "start", "total")

    def __init__(self, owner: Profiler, name: str) -> None:
        self.owner, self.name = owner, name
        self.total, self.inclusive, self.start, self.entered, self.depth, self.calls = 0.0, 0.0, 0.0, 0.0, 0, 0

    def __enter__(self) -> None:
        owner = self.owner
        if owner.enabled:
            if self.depth == 0:
                now = time.perf_counter()
                if owner.stack:  # pause the enclosing section
                    outer = owner.stack[-1]
                    outer.total += now - outer.start
                owner.stack.append(self)
                self.start = self.entered = now
                self.calls += 1
            self.depth += 1

    def __exit__(self, *exc: Any) -> None:
        owner = self.owner
        if owner.enabled and self.depth:
            self.depth -= 1
            if self.depth == 0:
                now = time.perf_counter()
                self.total += now - self.start
                self.inclusive += now - self.entered
                if owner.stack and owner.stack[-1] is self:
                    owner.stack.pop()
                    if owner.stack:  # resume the enclosing section
                        owner.stack[-1].start = now


class Profiler:
    """Section timers plus the wall time of the profiled run."""

    env: _Section
    act: _Section
    sample: _Section
    learn: _Section
    evaluate: _Section
    evolve: _Section
    checkpoint: _Section
    log: _Section
    setup: _Section

    def __init__(self) -> None:
        self.enabled = False
        self.wall = 0.0
        self.stack: list[_Section] = []
        for name in SECTIONS:
            setattr(self, name, _Section(self, name))

    def reset(self) -> None:
        """Zero every timer."""
        self.wall = 0.0
        self.stack.clear()
        for name in SECTIONS:
            section: _Section = getattr(self, name)
            section.total, section.inclusive, section.depth, section.calls = 0.0, 0.0, 0, 0

    @contextmanager
    def run(self) -> Iterator[Profiler]:
        """Enable, time the enclosed run as the total, then disable."""
        self.reset()
        self.enabled = True
        start = time.perf_counter()
        try:
            yield self
        finally:
            self.wall = time.perf_counter() - start
            self.enabled = False

    def summary(self) -> dict[str, dict[str, float]]:
        """``{section: {"seconds": s, "share": fraction of wall, "calls": n, "inclusive_seconds": s}}``
        including ``other`` and ``total`` (which have neither calls nor inclusive time).
        ``seconds`` is exclusive: env steps and actions inside an evaluation count as ``env`` and
        ``act``, and ``evaluate`` keeps the rest (its ``inclusive_seconds`` is the whole evaluation)."""
        totals = {name: getattr(self, name).total for name in SECTIONS}
        totals["other"] = max(0.0, self.wall - sum(totals.values()))
        wall = self.wall or 1.0
        result: dict[str, dict[str, float]] = {
            name: {"seconds": round(value, 4), "share": round(value / wall, 4)} for name, value in totals.items()}
        for name in SECTIONS:
            result[name]["calls"] = getattr(self, name).calls
            result[name]["inclusive_seconds"] = round(getattr(self, name).inclusive, 4)
        result["total"] = {"seconds": round(self.wall, 4), "share": 1.0}
        return result

    def table(self) -> str:
        """The summary as an aligned text table."""
        lines = [f"{'section':<11}{'seconds':>10}{'share':>8}{'calls':>9}  what"]
        for name, row in self.summary().items():
            calls = f"{int(row['calls']):>9}" if "calls" in row else " " * 9
            lines.append(f"{name:<11}{row['seconds']:>10.2f}{row['share'] * 100:>7.1f}%{calls}  "
                         f"{SECTION_HELP.get(name, '')}")
        return "\n".join(lines)


PROFILER = Profiler()
"""The process-wide profiler every loop reports into."""
