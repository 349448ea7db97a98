"""Entry points of the offline-RL and contextual-bandit paradigms (import no torch: only specs)."""

from agile_core.registry import Paradigm
from agile_offline.specs import BanditEnvSpec, CQNSpec, NeuralTSSpec, NeuralUCBSpec, OfflineEnvSpec

OFFLINE = Paradigm(
    name="offline",
    distribution="agile-offline",
    algorithms=(CQNSpec,),
    env_spec=OfflineEnvSpec,
    hooks={
        "train_loop": "agile_offline.training:train_offline",
        "loop_kwargs": "agile_offline.run:loop_kwargs",
    },
)

BANDITS = Paradigm(
    name="bandits",
    distribution="agile-offline",
    algorithms=(NeuralUCBSpec, NeuralTSSpec),
    env_spec=BanditEnvSpec,
    hooks={
        "train_loop": "agile_offline.bandits.training:train_bandits",
        "make_env": "agile_offline.bandits.run:make_env",
        "loop_kwargs": "agile_offline.bandits.run:loop_kwargs",
    },
    training_fields=frozenset({"episode_steps"}),
)
