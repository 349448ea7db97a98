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


def best_of_seeded_run(path: str | os.PathLike[str], seed: int, *overrides: str) -> float:
    """Train the example manifest at `path` (evolution on) with `seed` as ``training.seed`` and
    ``mutation.rand_seed`` plus the ``key=value`` `overrides`; the best greedy evaluation any
    member reached."""
    from agile_core.overrides import apply_overrides
    from agile_core.specs.manifest import validate_source
    from agile_core.trainer import LocalTrainer
    from agile_core.yaml_source import read_manifest_file

    seeded = [f"training.seed={seed}", f"mutation.rand_seed={seed}", *overrides]
    manifest = validate_source(apply_overrides(read_manifest_file(path), seeded))
    population, _ = LocalTrainer.from_manifest(manifest).train(verbose=False)
    return max(max(agent.fitness) for agent in population)
