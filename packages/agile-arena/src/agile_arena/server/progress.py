"""How far a job has got, read from its run directory (the files `agile train` writes, see
docs/run-directory.md) without touching the training:

- `manifest.resolved.json`: the step budget, `training.max_steps` for each of `training.pop_size`
  agents (written before training starts);
- the last row of `metrics.csv`: the population's steps so far;
- `metrics.history.jsonl`: one line per evaluated generation, read incrementally (only what was
  appended since the last look), for the generation, its best fitness and the best of the run.

The run directory belongs to the job, so every file is opened only when it is a regular file
inside the job folder (no links out, no FIFOs or devices), and reads are bounded.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

from agile_arena.server.paths import UnsafePath, resolve_inside

TAIL_BYTES = 8192
"""Bytes read from the end of metrics.csv to find its last row."""
HISTORY_CHUNK = 1 << 20
"""Bytes of metrics.history.jsonl read at once; a longer line is skipped."""
HISTORY_BUDGET = 16 << 20
"""Bytes of metrics.history.jsonl read per look (the rest waits for the next one)."""
MANIFEST_BYTES = 1 << 20


@dataclass
class _History:
    """What the generation history said so far, and where reading stopped."""

    inode: int = -1
    offset: int = 0
    skipping: bool = False
    generation: int | None = None
    step: int | None = None
    fitness: float | None = None
    best: float | None = None


@dataclass
class _JobState:
    history: _History = field(default_factory=_History)
    budget_key: tuple[int, int, int] | None = None
    budget: int | None = None
    metrics_key: tuple[int, int, int] | None = None
    metrics_step: int | None = None


class ProgressReader:
    """Progress of each job from its run directory, cached between looks (files that did not
    change are not read again)."""

    def __init__(self) -> None:
        self._states: dict[str, _JobState] = {}
        self._lock = threading.Lock()

    def forget(self, job_id: str) -> None:
        """Drop what is cached about a job (deleted, or restarted from scratch)."""
        with self._lock:
            self._states.pop(job_id, None)

    def read(self, job_id: str, job_dir: Path) -> dict[str, Any] | None:
        """`{"steps", "total_steps", "generation", "fitness", "best_fitness", "updated_at"}`, or None
        before the run wrote anything."""
        with self._lock:
            state = self._states.setdefault(job_id, _JobState())
            budget = self._budget(state, job_dir)
            steps = self._metrics_step(state, job_dir)
            history = self._history(state, job_dir)
        if budget is None and steps is None and history.generation is None:
            return None
        updated = _newest_mtime(job_dir, ("run/metrics.csv", "run/metrics.history.jsonl"))
        candidates = [value for value in (steps, history.step) if value is not None]
        return {
            "steps": max(candidates) if candidates else 0,
            "total_steps": budget,
            "generation": history.generation,
            "fitness": history.fitness,
            "best_fitness": history.best,
            "updated_at": None if updated is None else datetime.fromtimestamp(updated, UTC).isoformat(),
        }

    # ------------------------------------------------------------------ the three files
    def _budget(self, state: _JobState, job_dir: Path) -> int | None:
        with _open_regular(job_dir, "run/manifest.resolved.json") as opened:
            if opened is None:
                return None
            handle, key = opened
            if key != state.budget_key:
                state.budget_key, state.budget = key, _budget_of(handle.read(MANIFEST_BYTES))
        return state.budget

    def _metrics_step(self, state: _JobState, job_dir: Path) -> int | None:
        with _open_regular(job_dir, "run/metrics.csv") as opened:
            if opened is None:
                return None
            handle, key = opened
            if key != state.metrics_key:
                size = key[1]
                handle.seek(max(0, size - TAIL_BYTES))
                state.metrics_key, state.metrics_step = key, _last_step(handle.read(TAIL_BYTES))
        return state.metrics_step

    def _history(self, state: _JobState, job_dir: Path) -> _History:
        with _open_regular(job_dir, "run/metrics.history.jsonl") as opened:
            if opened is None:
                state.history = _History()
                return state.history
            handle, (inode, size, _) = opened
            history = state.history
            if inode != history.inode or size < history.offset:  # rewritten (a resume) or started afresh
                history = state.history = _History(inode=inode)
            spent = 0
            while history.offset < size and spent < HISTORY_BUDGET:
                handle.seek(history.offset)
                data = handle.read(min(size - history.offset, HISTORY_CHUNK))
                spent += len(data)
                end = data.rfind(b"\n")
                if end < 0:
                    if len(data) >= HISTORY_CHUNK:  # a line longer than any record: skip it
                        history.offset += len(data)
                        history.skipping = True
                    break
                for line in data[:end].split(b"\n"):
                    if history.skipping:
                        history.skipping = False
                        continue
                    _take_generation(history, line)
                history.offset += end + 1
        return history


@contextlib.contextmanager
def _open_regular(job_dir: Path, relative: str) -> Any:
    """`(binary file, (inode, size, mtime_ns))` for a regular file inside the job folder, else None."""
    descriptor: int | None = None
    with contextlib.suppress(UnsafePath, OSError):
        path = resolve_inside(job_dir, relative, "the job folder")
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if descriptor is None:
        yield None
        return
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        yield (handle, (info.st_ino, info.st_size, info.st_mtime_ns)) if stat.S_ISREG(info.st_mode) else None


def _newest_mtime(job_dir: Path, relatives: tuple[str, ...]) -> float | None:
    times = []
    for relative in relatives:
        with _open_regular(job_dir, relative) as opened:
            if opened is not None:
                times.append(opened[1][2] / 1e9)
    return max(times) if times else None


def _budget_of(raw: bytes) -> int | None:
    """`training.max_steps * training.pop_size` of a resolved manifest (None for dataset epochs)."""
    try:
        training = json.loads(raw).get("training")
    except (ValueError, RecursionError, AttributeError):
        return None
    if not isinstance(training, dict) or training.get("num_epochs") is not None:
        return None
    steps, agents = training.get("max_steps"), training.get("pop_size")
    if _integer(steps) and _integer(agents) and steps > 0 and agents > 0:
        return int(steps) * int(agents)
    return None


def _last_step(tail: bytes) -> int | None:
    """The population's steps by a metrics CSV tail: the `step` of its last complete row, or the
    last `perf/global_steps` value when larger (the LLM loops' `step` counts per member; that
    metric is the population's total in every loop)."""
    lines = tail.split(b"\n")[:-1]  # the part after the last newline is unfinished
    step = total = None
    for line in reversed(lines):
        cells = line.split(b",")
        first = cells[0].strip()
        if step is None and first.isdigit() and len(first) <= 18:
            step = int(first)
        if total is None and len(cells) >= 3 and cells[1].strip() == b"perf/global_steps":
            with contextlib.suppress(ValueError, OverflowError):
                value = float(cells[2])
                total = int(value) if math.isfinite(value) and 0 <= value < 2**62 else None
        if step is not None and total is not None:
            break
    found = [value for value in (step, total) if value is not None]
    return max(found) if found else None


def _take_generation(history: _History, line: bytes) -> None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return
    if not isinstance(record, dict):
        return
    generation, step, agents = record.get("generation"), record.get("step"), record.get("agents")
    if not _integer(generation) or not _integer(step) or not isinstance(agents, list):
        return
    scores = [agent.get("fitness") for agent in agents if isinstance(agent, dict)]
    finite = [float(score) for score in scores if _number(score) and math.isfinite(score)]
    history.generation, history.step = int(generation), int(step)
    history.fitness = max(finite) if finite else None
    if history.fitness is not None:
        history.best = history.fitness if history.best is None else max(history.best, history.fitness)


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e300
