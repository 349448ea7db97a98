"""Keep freed memory in the process while training (glibc's allocator on Linux).

By default glibc serves an allocation above a threshold that adapts to the sizes seen (128 KiB at
first, at most 32 MiB) with a fresh ``mmap``, and gives the top of the heap back to the kernel
once more than twice that threshold lies free there. A learning step allocates and frees the same
few megabytes of activations and gradients over and over; each time they come back as new pages,
and every page costs a fault on first touch. A stacked LSTM update of 4 members took about 7,400
faults (222 ms of CPU); with the thresholds fixed it takes 2 (148 ms). Fixing them keeps freed
memory for reuse instead, so the process's resident size stays at its high-water mark.

Kept free memory can fragment: an env that allocates and frees its own long-lived objects between
learning steps (Box2D builds a new world of about 100 KiB at every LunarLander reset) settles them
inside the holes a learning step left, the next step no longer fits there, and the heap grows,
DQN on LunarLander from 600 MB to 1.1 GB. So a watcher thread reads the resident size once a second
and, when it has grown by :data:`TRIM_GROWTH` since the last trim, hands the free pages inside the
heap back (``malloc_trim``): a hole a later step reuses costs its page faults once per trim, not
once per step.

A user who sets ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_TOP_PAD_``, or
runs under another allocator (musl, jemalloc via ``LD_PRELOAD``...), keeps their setting.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["retain_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
MMAP_THRESHOLD = 32 << 20
"""Allocations above this still get their own mapping (glibc's largest allowed value)."""
TRIM_THRESHOLD = 1 << 30
"""Free memory at the top of the heap kept for reuse before any is given back."""
TRIM_GROWTH = 64 << 20
"""Growth of the resident size since the last trim that triggers the next one."""
WATCH_INTERVAL = 1.0
"""Seconds between two looks of the watcher."""
_watcher: threading.Thread | None = None


def _resident_bytes(statm: int, page: int) -> int:
    return int(os.pread(statm, 64, 0).split()[1]) * page


def _watch(trim: Callable[[int], int], interval: float, growth: int) -> None:
    """Trim the heap whenever the resident size has grown by `growth` since the last trim."""
    page = os.sysconf("SC_PAGE_SIZE")
    statm = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        baseline = _resident_bytes(statm, page)
        while True:
            time.sleep(interval)
            if _resident_bytes(statm, page) > baseline + growth:
                trim(0)  # ctypes lets go of the GIL: training goes on while glibc walks its heap
                baseline = _resident_bytes(statm, page)
    finally:
        os.close(statm)


def _start_watcher(libc: ctypes.CDLL) -> None:
    global _watcher
    if _watcher is None and os.path.exists("/proc/self/statm"):
        trim = libc.malloc_trim
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        _watcher = threading.Thread(target=_watch, args=(trim, WATCH_INTERVAL, TRIM_GROWTH),
                                    name="agile-heap-trim", daemon=True)
        _watcher.start()


def retain_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for the rest of the process and start the trim
    watcher; True when both took effect (False on other platforms or allocators, or when the
    user set them)."""
    if not sys.platform.startswith("linux") or any(os.environ.get(name) for name in _USER_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl has a mallopt that does nothing)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return False
    _start_watcher(libc)
    return True
