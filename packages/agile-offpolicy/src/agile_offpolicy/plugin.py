"""Entry point of the off-policy paradigm (imports no torch at module level: only specs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agile_core.registry import Paradigm
from agile_core.specs.env import GymEnvSpec
from agile_offpolicy.specs import ALGORITHM_SPECS

if TYPE_CHECKING:
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.training.options import RunOptions


class OffPolicyParadigm(Paradigm):
    """DQN, RainbowDQN, DDPG and TD3 on Gymnasium envs, learning from a replay memory."""

    name = "off_policy"
    distribution = "agile-offpolicy"
    algorithms = ALGORITHM_SPECS
    env_spec = GymEnvSpec
    training_fields = frozenset({"replay_buffer", "learning_delay", "eps_start", "eps_end", "eps_decay"})

    def run_loop(self, manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                 device: str) -> tuple[list[Any], list[float]]:
        from agile_offpolicy.run import run_loop

        return run_loop(manifest, env, population, options, device)

    def make_replay_buffer(self, spec: Any, algo_spec: Any, device: Any, *, n_step: bool = False,
                           **spaces: Any) -> Any:
        from agile_offpolicy.run import build_buffer

        return build_buffer(spec, algo_spec, device, n_step=n_step, **spaces)


PARADIGM = OffPolicyParadigm()
