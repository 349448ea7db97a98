"""Public import path of the on-policy rollout buffer.

The implementation lives in :mod:`agile_onpolicy.rollout` (storage, advantage
estimators, sequence planning, batches); see :mod:`agile_onpolicy.rollout.buffer`
for the row contract and how a Gymnasium 1.x training loop must call the buffer.
"""

from agile_onpolicy.rollout import (
    SEQUENCE_TYPES,
    RecurrentBatch,
    RolloutBatch,
    RolloutBuffer,
    SequenceType,
    TensorTree,
    TruncationBootstrap,
    compute_gae,
    compute_monte_carlo,
    normalize_advantages,
)

__all__ = [
    "SEQUENCE_TYPES",
    "RecurrentBatch",
    "RolloutBatch",
    "RolloutBuffer",
    "SequenceType",
    "TensorTree",
    "TruncationBootstrap",
    "compute_gae",
    "compute_monte_carlo",
    "normalize_advantages",
]
