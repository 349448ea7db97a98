"""Memories of the multi-agent algorithms."""

from agile_marl.buffers.replay import MultiAgentBatch, MultiAgentReplayBuffer
from agile_marl.buffers.rollout import MultiAgentRolloutBatch, MultiAgentRolloutBuffer

__all__ = ["MultiAgentBatch", "MultiAgentReplayBuffer", "MultiAgentRolloutBatch", "MultiAgentRolloutBuffer"]
