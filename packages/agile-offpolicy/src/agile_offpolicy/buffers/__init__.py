"""Replay buffers: uniform (from core), n-step (per-sub-env windows) and proportional prioritised.

See :mod:`agile_offpolicy.buffers.multistep` for the n-step + PER alignment contract.
"""

from agile_core.buffers.batch import NStepBatch, PrioritizedBatch, ReplayBatch, Transitions
from agile_core.buffers.replay import ReplayBuffer
from agile_core.buffers.ring import RingBuffer

from .multistep import MultiStepReplayBuffer
from .prioritized import PrioritizedReplayBuffer, beta_schedule
from .segment_tree import SumMinTree

__all__ = [
    "MultiStepReplayBuffer",
    "NStepBatch",
    "PrioritizedBatch",
    "PrioritizedReplayBuffer",
    "ReplayBatch",
    "ReplayBuffer",
    "RingBuffer",
    "SumMinTree",
    "Transitions",
    "beta_schedule",
]
