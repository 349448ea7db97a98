"""Entry points of the multi-agent paradigms (import no torch: only specs).

Two paradigms share this package's envs, agents and evaluation: off-policy (MADDPG, MATD3, with a
shared replay memory) and on-policy (IPPO), each with its own loop."""

from agile_core.registry import Paradigm
from agile_marl.specs.env import MultiAgentEnvSpec
from agile_marl.specs.ippo import IPPOSpec
from agile_marl.specs.maddpg import MADDPGSpec, MATD3Spec
from agile_marl.specs.network import MultiAgentNetworkSpec

_SHARED_HOOKS = {"make_env": "agile_marl.run:make_env", "agent_spaces": "agile_marl.run:agent_spaces"}

OFF_POLICY = Paradigm(
    name="multi_agent_off_policy",
    distribution="agile-marl",
    algorithms=(MADDPGSpec, MATD3Spec),
    network_spec=MultiAgentNetworkSpec,
    env_spec=MultiAgentEnvSpec,
    hooks={
        **_SHARED_HOOKS,
        "run_loop": "agile_marl.run:off_policy_run_loop",
        "buffer_factory": "agile_marl.run:build_buffer",
    },
    training_fields=frozenset({"replay_buffer", "learning_delay", "sum_scores"}),
)

ON_POLICY = Paradigm(
    name="multi_agent_on_policy",
    distribution="agile-marl",
    algorithms=(IPPOSpec,),
    network_spec=MultiAgentNetworkSpec,
    env_spec=MultiAgentEnvSpec,
    hooks={
        **_SHARED_HOOKS,
        "run_loop": "agile_marl.run:on_policy_run_loop",
    },
    training_fields=frozenset({"sum_scores"}),
)
