"""Algorithm base classes every paradigm implements."""

from agile_core.algorithms.base import (
    EvolvableAlgorithm,
    LLMAlgorithm,
    MultiAgentAlgorithm,
    NetworkGroup,
    OptimizerSlot,
    SingleAgentAlgorithm,
)
from agile_core.algorithms.spaces import UnsupportedSpaceError, check_space

__all__ = [
    "EvolvableAlgorithm",
    "LLMAlgorithm",
    "MultiAgentAlgorithm",
    "NetworkGroup",
    "OptimizerSlot",
    "SingleAgentAlgorithm",
    "UnsupportedSpaceError",
    "check_space",
]
