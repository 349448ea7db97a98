"""Entry points of the offline-RL and contextual-bandit paradigms (import no torch: only specs)."""

from agile_core.registry import Paradigm
from agile_offline.specs import BanditEnvSpec, CQNSpec, NeuralTSSpec, NeuralUCBSpec, OfflineEnvSpec

OFFLINE = Paradigm(
    name="offline",
    distribution="agile-offline",
    algorithms=(CQNSpec,),
    env_spec=OfflineEnvSpec,
    hooks={
        "run_loop": "agile_offline.run:run_loop",
    },
)

BANDITS = Paradigm(
    name="bandits",
    distribution="agile-offline",
    algorithms=(NeuralUCBSpec, NeuralTSSpec),
    env_spec=BanditEnvSpec,
    hooks={
        "run_loop": "agile_offline.bandits.run:run_loop",
        "make_env": "agile_offline.bandits.run:make_env",
    },
    training_fields=frozenset({"episode_steps"}),
)
