"""Pydantic specs of every manifest section (no torch)."""

from agile_core.specs.algorithm import AlgorithmSpec
from agile_core.specs.env import EnvSpec, GymEnvSpec, WrapperSpec
from agile_core.specs.mutation import MutationProbabilities, MutationSpec, RLHyperparameter
from agile_core.specs.network import (
    CnnConfig,
    LstmConfig,
    MlpConfig,
    MultiInputConfig,
    NetworkSpec,
)
from agile_core.specs.selection import (
    MultiFrequencySelectionSpec,
    SelectionStrategySpec,
    TournamentSelectionSpec,
)
from agile_core.specs.training import NStepBufferArgs, PerBufferArgs, ReplayBufferSpec, TrainingSpec

__all__ = [
    "AlgorithmSpec",
    "CnnConfig",
    "EnvSpec",
    "GymEnvSpec",
    "LstmConfig",
    "MlpConfig",
    "MultiFrequencySelectionSpec",
    "MultiInputConfig",
    "MutationProbabilities",
    "MutationSpec",
    "NStepBufferArgs",
    "NetworkSpec",
    "PerBufferArgs",
    "RLHyperparameter",
    "ReplayBufferSpec",
    "SelectionStrategySpec",
    "TournamentSelectionSpec",
    "TrainingSpec",
    "WrapperSpec",
]
