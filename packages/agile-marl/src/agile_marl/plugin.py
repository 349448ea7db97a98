"""Entry points of the multi-agent paradigms (import no torch at module level: only specs).

Two paradigms share this package's envs, agents and evaluation: off-policy (MADDPG, MATD3, with a
shared replay memory) and on-policy (IPPO), each with its own loop."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agile_core.registry import Paradigm
from agile_marl.specs.env import MultiAgentEnvSpec
from agile_marl.specs.ippo import IPPOSpec
from agile_marl.specs.maddpg import MADDPGSpec, MATD3Spec
from agile_marl.specs.network import MultiAgentNetworkSpec

if TYPE_CHECKING:
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.training.options import RunOptions


class _MultiAgentParadigm(Paradigm):
    """PettingZoo Parallel envs, one network set per agent id."""

    distribution = "agile-marl"
    env_spec = MultiAgentEnvSpec
    network_spec = MultiAgentNetworkSpec
    builds_envs = True

    def make_env(self, spec: Any, *, base_dir: str | Path | None = None, seed: int | None = None,
                 num_envs: int | None = None) -> Any:
        from agile_marl.run import make_env

        return make_env(spec, base_dir=base_dir, seed=seed, num_envs=num_envs)

    def agent_spaces(self, env: Any) -> tuple[Any, ...]:
        from agile_marl.run import agent_spaces

        return agent_spaces(env)


class MultiAgentOffPolicyParadigm(_MultiAgentParadigm):
    """MADDPG and MATD3: centralised critics learning from a shared replay memory."""

    name = "multi_agent_off_policy"
    algorithms = (MADDPGSpec, MATD3Spec)
    training_fields = frozenset({"replay_buffer", "learning_delay", "sum_scores"})

    def run_loop(self, manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                 device: str) -> tuple[list[Any], list[float]]:
        from agile_marl.run import off_policy_run_loop

        return off_policy_run_loop(manifest, env, population, options, device)

    def make_replay_buffer(self, spec: Any, algo_spec: Any, device: Any, *, n_step: bool = False,
                           **spaces: Any) -> Any:
        from agile_marl.run import build_buffer

        return build_buffer(spec, algo_spec, device, n_step=n_step, **spaces)


class MultiAgentOnPolicyParadigm(_MultiAgentParadigm):
    """IPPO: independent PPO learners, one per agent id (or group)."""

    name = "multi_agent_on_policy"
    algorithms = (IPPOSpec,)
    training_fields = frozenset({"sum_scores"})

    def run_loop(self, manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                 device: str) -> tuple[list[Any], list[float]]:
        from agile_marl.run import on_policy_run_loop

        return on_policy_run_loop(manifest, env, population, options, device)


OFF_POLICY = MultiAgentOffPolicyParadigm()
ON_POLICY = MultiAgentOnPolicyParadigm()
