"""agile: manifest-driven reinforcement learning with evolutionary hyperparameter optimisation.

The meta-package mirrors the reference layout so user code ports by renaming the import:
`from agile.models import TrainingSpec`, `from agile.training import train_off_policy`.
Heavy modules (torch, paradigm packages) load on first attribute access, not at import.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ArenaClient", "ArenaTrainer", "LocalTrainer", "Trainer", "TrainingManifest", "models", "training"]

_LAZY: dict[str, str] = {
    "TrainingManifest": "agile_core.specs.manifest:TrainingManifest",
    "LocalTrainer": "agile_core.trainer:LocalTrainer",
    "Trainer": "agile_core.trainer:Trainer",
    "ArenaTrainer": "agile_arena.trainer:ArenaTrainer",
    "ArenaClient": "agile_arena.client:ArenaClient",
}


def __getattr__(name: str) -> Any:
    if name in ("models", "training"):
        return importlib.import_module(f"agile.{name}")
    if name in _LAZY:
        module, _, attr = _LAZY[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'agile' has no attribute '{name}'")
