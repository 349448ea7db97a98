"""Numbered or single overwritten checkpoints under one root directory."""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from agile_core.checkpoint.errors import CheckpointError
from agile_core.checkpoint.fsutil import make_dirs, parse_side_name
from agile_core.checkpoint.reader import Checkpoint, inspect_checkpoint, read_checkpoint
from agile_core.checkpoint.writer import discard, recover, write_checkpoint

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

LOCK_NAME = ".agile-checkpoint.lock"
_LOAD_ATTEMPTS = 3
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class CheckpointManager:
    """Save and find checkpoints under ``root``.

    * ``overwrite=False``: each save writes ``root/<prefix>_<step:09d>``; ``keep_last`` (if
      set) keeps, after each save, the checkpoint just written plus the ``keep_last - 1``
      highest-numbered others (so resuming from an early step never deletes the new save).
    * ``overwrite=True``: every save atomically replaces ``root/<latest_name>``.

    Saves hold an exclusive ``flock`` on ``root/.agile-checkpoint.lock`` (one writer at a
    time) and first repair leftovers of interrupted saves. Reading methods never modify
    the directory and may run concurrently with a writer.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        keep_last: int | None = None,
        prefix: str = "checkpoint",
        latest_name: str = "latest",
    ) -> None:
        if keep_last is not None and (type(keep_last) is not int or keep_last < 1):
            raise ValueError(f"keep_last must be a positive int or None, got {keep_last!r}")
        for label, value in (("prefix", prefix), ("latest_name", latest_name)):
            if not _NAME.match(value):
                raise ValueError(f"invalid {label} {value!r}")
        self.root = Path(root).absolute()
        self.overwrite = overwrite
        self.keep_last = keep_last
        self.prefix = prefix
        self.latest_name = latest_name
        self._numbered = re.compile(rf"^{re.escape(prefix)}_(\d+)$")

    def path_for(self, step: int) -> Path:
        """Directory a save of ``step`` writes to."""
        _check_step(step)
        return self.root / (self.latest_name if self.overwrite else f"{self.prefix}_{step:09d}")

    def save(
        self, step: int, parts: Mapping[str, Any], metadata: Mapping[str, Any] | None = None
    ) -> Path:
        """Write a checkpoint for ``step`` (see :func:`write_checkpoint`) and return its path."""
        target = self.path_for(step)
        make_dirs(self.root)
        with self._lock():
            self._recover_all()
            write_checkpoint(target, parts, metadata=metadata, step=step)
            if self.keep_last is not None and not self.overwrite:
                others = [path for path in self.list() if path != target]
                for old in others[: max(0, len(others) - (self.keep_last - 1))]:
                    discard(old)
        return target

    def list(self) -> builtins.list[Path]:
        """Complete checkpoints, oldest first (in overwrite mode at most one)."""
        if self.overwrite:
            latest = self.root / self.latest_name
            return [latest] if _complete(latest) else []
        return [path for _, path in sorted(self._numbered_candidates().items()) if _complete(path)]

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None. Corrupt newer ones are skipped (logged)."""
        if self.overwrite:
            found = self.list()
            return found[0] if found else None
        for _, path in sorted(self._numbered_candidates().items(), reverse=True):
            if _complete(path):
                return path
        return None

    def load_latest(
        self, *, map_location: str | torch.device = "cpu", lazy: bool = False, verify: bool = True
    ) -> Checkpoint | None:
        """Read the newest complete checkpoint (see :func:`read_checkpoint`), or None.

        If a concurrent writer prunes the found checkpoint before it is opened, the search
        is repeated (a few times) instead of failing.
        """
        for attempt in range(_LOAD_ATTEMPTS):
            path = self.latest()
            if path is None:
                return None
            try:
                return read_checkpoint(path, map_location=map_location, lazy=lazy, verify=verify)
            except CheckpointError:
                if attempt == _LOAD_ATTEMPTS - 1 or os.path.lexists(path):
                    raise
        raise AssertionError("unreachable")

    def _numbered_candidates(self) -> dict[int, Path]:
        """Numbered names present, or recoverable from an interrupted-overwrite backup."""
        found: dict[int, Path] = {}
        for name in _entries(self.root):
            side = parse_side_name(name)
            if side is not None and side[0] != "old":
                continue
            logical = name if side is None else side[1]
            match = self._numbered.match(logical)
            if match is not None:
                found[int(match.group(1))] = self.root / logical
        return found

    def _recover_all(self) -> None:
        names = {side[1] for entry in _entries(self.root) if (side := parse_side_name(entry))}
        for name in sorted(names):
            recover(self.root / name)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        fd = os.open(self.root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _check_step(step: int) -> None:
    if type(step) is not int or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")


def _entries(root: Path) -> builtins.list[str]:
    try:
        return os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _complete(path: Path) -> bool:
    try:
        inspect_checkpoint(path)
    except CheckpointError as exc:
        if os.path.lexists(path):
            logger.warning("skipping unreadable checkpoint: %s", exc)
        return False
    return True
