"""Test-wide settings: single-threaded torch (5-14x faster on 2 cores), no network for W&B."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


def pytest_collection_modifyitems(config, items) -> None:
    """Test files with long tests (marked ``learning`` or ``slow``) first, each file kept whole (its
    module fixtures are set up once): the two CI workers then share the long tests from the start
    instead of one running a minutes-long test alone at the end."""
    long_files = {item.path for item in items
                  if item.get_closest_marker("learning") or item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in long_files)
