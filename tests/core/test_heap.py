"""agile_core.training.heap: freed memory stays in the process while training (glibc)."""

import subprocess
import sys

import pytest

from agile_core.training import heap

# Allocate and free three 1 MiB blocks twenty times (numpy touches every page): glibc's default
# gives the top of the heap back once over 2 MiB lies free there, so each round faults the pages in
# again; with retain_freed_memory() the pages are reused.
CHURN = """
import resource, sys
import numpy as np
from agile_core.training.heap import retain_freed_memory
retained = retain_freed_memory()
def churn():
    blocks = [np.ones(1 << 17) for _ in range(3)]
    del blocks
churn(); churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    churn()
print(retained, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _churn_faults(env: dict[str, str]) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", CHURN], capture_output=True, text=True, check=True, env=env)
    retained, faults = out.stdout.split()
    return retained == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_retained_memory_is_reused_without_page_faults():
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    retained, faults = _churn_faults(base)
    # the user's own setting (here glibc's default top pad) wins: nothing is changed
    kept_default, default_faults = _churn_faults({**base, "MALLOC_TOP_PAD_": "131072"})
    assert retained and not kept_default
    assert faults < 100 <= default_faults  # 20 rounds x 3 blocks x 256 pages without it


def test_leaves_other_platforms_and_user_settings_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000000")
    assert heap.retain_freed_memory() is False
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert heap.retain_freed_memory() is False


# A heap with a 256 MiB hole below a block that stays (an env's long-lived objects leave such
# holes between learning steps): nothing is given back while the resident size holds still; once it
# grows by more than the watcher's threshold (here 80 MiB mapped outside the heap), the watcher hands the
# hole's pages back.
HOLE = """
import mmap
import time
import numpy as np
from agile_core.training import heap
heap.WATCH_INTERVAL = 0.05
assert heap.retain_freed_memory()
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
start = resident()
blocks = [np.ones(1 << 17) for _ in range(256)]
pin = np.ones(1 << 13)
time.sleep(0.3)
del blocks
time.sleep(0.3)
with_hole = resident()
grown = mmap.mmap(-1, 80 << 20)  # outside the heap, so the hole cannot serve it
for _ in range(80):
    grown.write(b"x" * (1 << 20))
for _ in range(100):
    if resident() < with_hole:
        break
    time.sleep(0.05)
print(start, with_hole, resident())
"""


def _hole(code: str) -> tuple[int, int, int]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    start, with_hole, end = map(int, out.stdout.split())
    assert with_hole >= start + 250  # freeing alone gives nothing back
    return start, with_hole, end


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_watcher_gives_back_the_pages_of_holes_in_the_heap_once_the_process_grows():
    start, with_hole, end = _hole(HOLE)
    assert end < start + 80 + 64, (start, with_hole, end)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_without_the_watcher_the_hole_stays_resident():
    """The same run with the watcher's threshold out of reach (the test above can fail)."""
    start, with_hole, end = _hole(HOLE.replace("heap.WATCH_INTERVAL = 0.05", "heap.TRIM_GROWTH = 1 << 40")
                                  .replace("range(100)", "range(6)"))
    assert end >= with_hole + 80 - 8, (start, with_hole, end)
