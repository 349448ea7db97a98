"""The example's paradigm: what a package would point its `agile.paradigms` entry point at.

Torch-free at import, like every plugin module: the loop and the buffers are imported inside the
methods. The example reuses the off-policy loop (replay memory, epsilon schedule, population
batching) through its public functions instead of writing its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agile_core.registry import Paradigm
from agile_core.specs.env import GymEnvSpec
from tests.core.example_algorithm.spec import ExpectedSarsaSpec

if TYPE_CHECKING:
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.training.options import RunOptions


class ExampleParadigm(Paradigm):
    """Expected SARSA on Gymnasium envs, trained by the off-policy loop."""

    name = "example"
    distribution = "agile-example"
    algorithms = (ExpectedSarsaSpec,)
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


PARADIGM = ExampleParadigm()
"""The instance the `agile.paradigms` entry point names (or `register_paradigm` takes)."""
