"""Entry point of the on-policy paradigm (imports no torch at module level: only specs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agile_core.registry import Paradigm
from agile_core.specs.env import GymEnvSpec
from agile_onpolicy.specs import ALGORITHM_SPECS

if TYPE_CHECKING:
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.training.options import RunOptions


class OnPolicyParadigm(Paradigm):
    """PPO (and its recurrent form) on Gymnasium envs, learning from fresh rollouts."""

    name = "on_policy"
    distribution = "agile-onpolicy"
    algorithms = ALGORITHM_SPECS
    env_spec = GymEnvSpec
    trains_on_ray = True

    def run_loop(self, manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                 device: str) -> tuple[list[Any], list[float]]:
        from agile_onpolicy.run import run_loop

        return run_loop(manifest, env, population, options, device)

    def make_phase(self, manifest: TrainingManifest, env: Any, device: str) -> Any:
        from agile_onpolicy.training import make_phase

        return make_phase(manifest, env, device)


PARADIGM = OnPolicyParadigm()
