"""agile-onpolicy: on-policy RL (PPO, recurrent PPO), rollout buffers and ``train_on_policy``.

Public names load on first use (importing the package imports no torch)."""

from agile_core.lazy import lazy_exports

_NAMES = {
    "PPO": "agile_onpolicy.ppo",
    "RolloutBuffer": "agile_onpolicy.rollout.buffer",
    "PPOSpec": "agile_onpolicy.specs",
    "RecurrentPPOSpec": "agile_onpolicy.specs",
    "train_on_policy": "agile_onpolicy.training",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
