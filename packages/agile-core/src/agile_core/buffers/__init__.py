"""Preallocated replay storage every paradigm can use: a ring of transitions laid out per leaf of
the observation space, and uniform 1-step replay over it (off-policy and offline learning)."""

from agile_core.buffers.batch import NStepBatch, PrioritizedBatch, ReplayBatch, Transitions
from agile_core.buffers.replay import ReplayBuffer
from agile_core.buffers.ring import RingBuffer

__all__ = ["NStepBatch", "PrioritizedBatch", "ReplayBatch", "ReplayBuffer", "RingBuffer", "Transitions"]
