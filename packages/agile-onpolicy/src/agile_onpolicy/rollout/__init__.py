"""On-policy rollout storage: buffer, advantage estimators, sequence planning for BPTT."""

from agile_core.training.advantages import compute_gae, compute_monte_carlo, normalize_advantages
from agile_core.training.tensor_tree import TensorTree
from agile_onpolicy.rollout.batches import RecurrentBatch, RolloutBatch
from agile_onpolicy.rollout.buffer import (
    RolloutBuffer,
    TruncationBootstrap,
    compute_returns_and_advantages_together,
)
from agile_onpolicy.rollout.sequences import (
    SEQUENCE_TYPES,
    SequencePlan,
    SequenceType,
    plan_sequences,
)

__all__ = [
    "SEQUENCE_TYPES",
    "RecurrentBatch",
    "RolloutBatch",
    "RolloutBuffer",
    "SequencePlan",
    "SequenceType",
    "TensorTree",
    "TruncationBootstrap",
    "compute_gae",
    "compute_monte_carlo",
    "compute_returns_and_advantages_together",
    "normalize_advantages",
    "plan_sequences",
]
