"""Contextual bandits: `BanditEnv` (a labelled table as a bandit), NeuralUCB and NeuralTS, and
`train_bandits` (the evolutionary loop). Importing this package imports torch."""

from agile_offline.bandits.env import BanditDataError, BanditEnv, load_table
from agile_offline.bandits.neural_ts import NeuralTS
from agile_offline.bandits.neural_ucb import NeuralUCB

__all__ = ["BanditDataError", "BanditEnv", "NeuralTS", "NeuralUCB", "load_table", "train_bandits"]


def __getattr__(name: str) -> object:
    if name == "train_bandits":
        from agile_offline.bandits.training import train_bandits

        return train_bandits
    raise AttributeError(name)
