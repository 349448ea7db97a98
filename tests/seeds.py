"""The seed every learning test (``-m learning``) trains with.

``AGILE_TEST_SEED`` (default 0): CI runs seed 0, so a failure repeats; other seeds measure whether a
test's setting, not its seed, carries it (``AGILE_TEST_SEED=3 pytest -m learning``; the figures
per seed are in docs/learning.md).
"""

from __future__ import annotations

import os
from typing import Any


def learning_seed() -> int:
    """The seed from ``AGILE_TEST_SEED``, 0 when unset."""
    return int(os.environ.get("AGILE_TEST_SEED", "0"))


def with_seed(manifest: Any, seed: int) -> Any:
    """A validated manifest with ``training.seed`` and ``mutation.rand_seed`` set to `seed` (as
    ``benchmarks/learning.py`` seeds a run), relative paths still read from its directory."""
    data = manifest.model_dump(mode="json", exclude_none=True)
    data["training"]["seed"] = seed
    if data.get("mutation") is not None:
        data["mutation"]["rand_seed"] = seed
    seeded = type(manifest).model_validate(data)
    seeded._base_dir = manifest.base_dir
    return seeded
