"""One run at a time in a run directory: an exclusive lock on `RUN_DIR/.lock` while a run writes.

Two runs sharing a run directory interleave their metrics and history files and overwrite each
other's checkpoints. The lock is an advisory ``flock`` on an open file, so the kernel releases it
when the process ends however it ends (SIGKILL included): a stale lock cannot outlive its run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_NAME = ".lock"


class RunDirectoryBusy(RuntimeError):
    """Another live process is writing to the run directory."""


@contextlib.contextmanager
def run_directory_lock(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s lock for the block; RunDirectoryBusy (naming the holder's pid) if another
    run holds it. Where the platform has no ``flock`` the block runs unlocked."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    path = run_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise RunDirectoryBusy(f"run directory {run_dir} is in use by another run (pid {holder}); "
                                   "wait for it to end or give another --run-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
