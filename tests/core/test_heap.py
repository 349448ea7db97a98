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
