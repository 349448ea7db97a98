"""Registered specs of the offline and bandit paradigms (import no torch)."""

from agile_offline.specs.bandits import BanditEnvSpec, NeuralTSSpec, NeuralUCBSpec
from agile_offline.specs.cqn import CQNSpec
from agile_offline.specs.env import OfflineEnvSpec

__all__ = ["BanditEnvSpec", "CQNSpec", "NeuralTSSpec", "NeuralUCBSpec", "OfflineEnvSpec"]
