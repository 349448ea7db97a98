"""Entry point of the on-policy paradigm (imports no torch: only specs)."""

from agile_core.registry import Paradigm
from agile_core.specs.env import GymEnvSpec
from agile_onpolicy.specs import ALGORITHM_SPECS

PARADIGM = Paradigm(
    name="on_policy",
    distribution="agile-onpolicy",
    algorithms=ALGORITHM_SPECS,
    env_spec=GymEnvSpec,
    hooks={
        "run_loop": "agile_onpolicy.run:run_loop",
        # one member's phase built outside the loop: what a Ray worker runs (agile_core.distributed)
        "make_phase": "agile_onpolicy.training:make_phase",
    },
)
