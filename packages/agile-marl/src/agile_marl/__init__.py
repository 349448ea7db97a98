"""agile-marl: multi-agent RL on PettingZoo Parallel envs (MADDPG, MATD3, IPPO) with evolutionary HPO.

Public names load on first use (importing the package imports no torch)."""

from agile_core.lazy import lazy_exports

_NAMES = {
    "MADDPG": "agile_marl.maddpg",
    "MATD3": "agile_marl.matd3",
    "IPPO": "agile_marl.ippo",
    "MultiAgentReplayBuffer": "agile_marl.buffers",
    "MultiAgentRolloutBuffer": "agile_marl.buffers",
    "PettingZooVecEnv": "agile_marl.envs",
    "AsyncPettingZooVecEnv": "agile_marl.envs",
    "make_vec_env": "agile_marl.envs",
    "MultiAgentEnvSpec": "agile_marl.specs.env",
    "MultiAgentNetworkSpec": "agile_marl.specs.network",
    "MADDPGSpec": "agile_marl.specs.maddpg",
    "MATD3Spec": "agile_marl.specs.maddpg",
    "IPPOSpec": "agile_marl.specs.ippo",
    "train_multi_agent_off_policy": "agile_marl.training.off_policy",
    "train_multi_agent_on_policy": "agile_marl.training.on_policy",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
