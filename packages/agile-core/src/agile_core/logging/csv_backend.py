"""Long-format CSV backend: one row per (step, metric) so files stay appendable."""

from __future__ import annotations

import csv
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ._params import flatten_params
from .backend import MetricsBackend
from .metric_names import RUN_CONFIG

SCALAR_HEADER: tuple[str, ...] = ("step", "name", "value", "wall_time")
TEXT_HEADER: tuple[str, ...] = ("step", "name", "text", "wall_time")


def default_text_path(path: Path) -> Path:
    """Where text events go for a scalar CSV at ``path`` (``metrics.csv`` → ``metrics.events.csv``)."""
    return path.with_name(f"{path.stem}.events{path.suffix or '.csv'}")


def _purge_rows(path: Path, header: Sequence[str], resume_step: int) -> None:
    """Rewrite ``path`` keeping only well-formed rows with ``step < resume_step``."""
    kept: list[list[str]] = []
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        next(reader, None)
        for row in reader:
            try:
                if len(row) == len(header) and int(row[0]) < resume_step:
                    kept.append(row)
            except ValueError:
                continue
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(kept)
    os.replace(tmp, path)


class _CsvFile:
    """An append-mode CSV file with a fixed header written exactly once."""

    def __init__(self, path: Path, header: Sequence[str], resume_step: int) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        exists = path.exists() and path.stat().st_size > 0
        if exists:
            with open(path, newline="", encoding="utf-8") as handle:
                found = next(csv.reader(handle), [])
            if tuple(found) != tuple(header):
                raise ValueError(f"{path} exists but its header {found} is not {list(header)}")
            if resume_step > 0:
                _purge_rows(path, header, resume_step)
            else:
                self._terminate_last_line(path)
        self._handle: IO[str] = open(path, "a", newline="", encoding="utf-8")  # noqa: SIM115
        self._writer = csv.writer(self._handle)
        if not exists:
            self._writer.writerow(header)
            self._handle.flush()

    @staticmethod
    def _terminate_last_line(path: Path) -> None:
        """Add a newline if a crash left the last row unterminated."""
        with open(path, "rb+") as handle:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                handle.write(b"\n")

    def write(self, rows: Sequence[Sequence[object]]) -> None:
        self._writer.writerows(rows)
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


class CsvBackend(MetricsBackend):
    """Appends scalar metrics to ``path`` as rows ``step,name,value,wall_time``.

    Text events (mutations, lineage, configuration) go to a sibling file
    ``<stem>.events.csv`` with rows ``step,name,text,wall_time`` so that the scalar
    file stays purely numeric.  Files are opened in append mode and flushed after
    every call; the header is written only when a file is new.  When
    ``resume_step`` is greater than zero, rows with ``step >= resume_step`` left by
    the interrupted run are dropped before appending, so curves continue without
    duplicates.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        resume_step: int = 0,
        text_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self._path = Path(path)
        self._text_path = (
            Path(text_path) if text_path is not None else default_text_path(self._path)
        )
        self._resume_step = int(resume_step)
        self._lock = threading.Lock()
        self._scalars = _CsvFile(self._path, SCALAR_HEADER, self._resume_step)
        self._text: _CsvFile | None = None
        if self._text_path.exists():
            self._text = _CsvFile(self._text_path, TEXT_HEADER, self._resume_step)
        self._closed = False

    @property
    def path(self) -> Path:
        """The scalar CSV file."""
        return self._path

    @property
    def text_path(self) -> Path:
        """The text-event CSV file (created on the first text event)."""
        return self._text_path

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("CsvBackend is closed")

    def log_scalars(self, step: int, metrics: Mapping[str, float]) -> None:
        """Append one row per metric."""
        now = f"{time.time():.3f}"
        with self._lock:
            self._check_open()
            self._scalars.write([(step, name, repr(value), now) for name, value in metrics.items()])

    def _write_text(self, rows: Sequence[tuple[int, str, str]]) -> None:
        now = f"{time.time():.3f}"
        with self._lock:
            self._check_open()
            if self._text is None:
                self._text = _CsvFile(self._text_path, TEXT_HEADER, self._resume_step)
            self._text.write([(*row, now) for row in rows])

    def log_text(self, step: int, name: str, text: str) -> None:
        """Append a text event to the events file."""
        self._write_text([(step, name, text)])

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        """Append the flattened configuration as one ``run/config`` JSON event."""
        self._write_text(
            [(self._resume_step, RUN_CONFIG, json.dumps(flatten_params(params), sort_keys=True))]
        )

    def close(self) -> None:
        """Close both files (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._scalars.close()
            if self._text is not None:
                self._text.close()
