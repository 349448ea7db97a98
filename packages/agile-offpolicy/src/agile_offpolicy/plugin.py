"""Entry point of the off-policy paradigm (imports no torch: only specs)."""

from agile_core.registry import Paradigm
from agile_core.specs.env import GymEnvSpec
from agile_offpolicy.specs import ALGORITHM_SPECS

PARADIGM = Paradigm(
    name="off_policy",
    distribution="agile-offpolicy",
    algorithms=ALGORITHM_SPECS,
    env_spec=GymEnvSpec,
    hooks={
        "run_loop": "agile_offpolicy.run:run_loop",
        "buffer_factory": "agile_offpolicy.run:build_buffer",
    },
    training_fields=frozenset({"replay_buffer", "learning_delay", "eps_start", "eps_end", "eps_decay"}),
)
