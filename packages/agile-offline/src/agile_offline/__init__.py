"""agile-offline: offline RL from Minari/HDF5 datasets (CQN, ``train_offline``), contextual bandits
(NeuralUCB, NeuralTS, ``train_bandits``) and a dataset recorder.

Public names load on first use (importing the package imports no torch)."""

from agile_core.lazy import lazy_exports

_NAMES = {
    "CQN": "agile_offline.cqn",
    "train_offline": "agile_offline.training",
    "TransitionData": "agile_offline.datasets",
    "DatasetError": "agile_offline.datasets",
    "load_dataset": "agile_offline.datasets",
    "load_minari": "agile_offline.datasets",
    "write_hdf5": "agile_offline.datasets",
    "write_minari": "agile_offline.datasets",
    "record": "agile_offline.recorder",
    "NeuralUCB": "agile_offline.bandits.neural_ucb",
    "NeuralTS": "agile_offline.bandits.neural_ts",
    "BanditEnv": "agile_offline.bandits.env",
    "train_bandits": "agile_offline.bandits.training",
    "CQNSpec": "agile_offline.specs",
    "OfflineEnvSpec": "agile_offline.specs",
    "NeuralUCBSpec": "agile_offline.specs",
    "NeuralTSSpec": "agile_offline.specs",
    "BanditEnvSpec": "agile_offline.specs",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
