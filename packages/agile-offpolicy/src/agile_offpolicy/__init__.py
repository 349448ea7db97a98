"""agile-offpolicy: off-policy RL (DQN, RainbowDQN, DDPG, TD3), replay buffers and ``train_off_policy``.

Public names load on first use (importing the package imports no torch)."""

from agile_core.lazy import lazy_exports

_NAMES = {
    "DQN": "agile_offpolicy.dqn",
    "RainbowDQN": "agile_offpolicy.rainbow",
    "DDPG": "agile_offpolicy.ddpg",
    "TD3": "agile_offpolicy.td3",
    "ReplayBuffer": "agile_offpolicy.buffers",
    "PrioritizedReplayBuffer": "agile_offpolicy.buffers",
    "MultiStepReplayBuffer": "agile_offpolicy.buffers",
    "DQNSpec": "agile_offpolicy.specs",
    "RainbowDQNSpec": "agile_offpolicy.specs",
    "DDPGSpec": "agile_offpolicy.specs",
    "TD3Spec": "agile_offpolicy.specs",
    "train_off_policy": "agile_offpolicy.training",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
