"""Training functions, as in `agilerl.training` (loaded from their paradigm packages on use)."""

from __future__ import annotations

import importlib
from typing import Any

_FUNCTIONS = {
    "train_off_policy": "agile_offpolicy.training",
    "train_on_policy": "agile_onpolicy.training",
    "train_multi_agent_off_policy": "agile_marl.training.off_policy",
    "train_multi_agent_on_policy": "agile_marl.training.on_policy",
    "train_offline": "agile_offline.training",
    "train_bandits": "agile_offline.bandits.training",
    "train_llm_dataset": "agile_llm.training",
    "train_llm_rollout": "agile_llm.rollout_training",
    "LocalTrainer": "agile_core.trainer",
    "Trainer": "agile_core.trainer",
}

__all__ = sorted(_FUNCTIONS)


def __getattr__(name: str) -> Any:
    if name in _FUNCTIONS:
        return getattr(importlib.import_module(_FUNCTIONS[name]), name)
    raise AttributeError(f"module 'agile.training' has no attribute '{name}'")
