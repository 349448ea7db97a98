"""The multi-agent training loops (``train_multi_agent_off_policy``, ``train_multi_agent_on_policy``)."""

from agile_core.lazy import lazy_exports

_NAMES = {
    "train_multi_agent_off_policy": "agile_marl.training.off_policy",
    "train_multi_agent_on_policy": "agile_marl.training.on_policy",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
