"""Replay buffers: uniform, n-step (per-sub-env windows) and proportional prioritised.

See :mod:`agile_offpolicy.buffers.multistep` for the n-step + PER alignment contract.
"""

from .batch import NStepBatch, PrioritizedBatch, ReplayBatch, Transitions
from .multistep import MultiStepReplayBuffer
from .prioritized import PrioritizedReplayBuffer, beta_schedule
from .replay import ReplayBuffer
from .ring import RingBuffer
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
