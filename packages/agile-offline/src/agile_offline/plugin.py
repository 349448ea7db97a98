"""Entry points of the offline-RL and contextual-bandit paradigms (import no torch at module
level: only specs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agile_core.registry import Paradigm
from agile_offline.specs import BanditEnvSpec, CQNSpec, NeuralTSSpec, NeuralUCBSpec, OfflineEnvSpec

if TYPE_CHECKING:
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.training.options import RunOptions


class OfflineParadigm(Paradigm):
    """CQN learning from a fixed data set, evaluated in its Gymnasium env."""

    name = "offline"
    distribution = "agile-offline"
    algorithms = (CQNSpec,)
    env_spec = OfflineEnvSpec

    def run_loop(self, manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                 device: str) -> tuple[list[Any], list[float]]:
        from agile_offline.run import run_loop

        return run_loop(manifest, env, population, options, device)


class BanditParadigm(Paradigm):
    """NeuralUCB and NeuralTS on a contextual bandit built from a labelled data set."""

    name = "bandits"
    distribution = "agile-offline"
    algorithms = (NeuralUCBSpec, NeuralTSSpec)
    env_spec = BanditEnvSpec
    training_fields = frozenset({"episode_steps"})
    builds_envs = True

    def run_loop(self, manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                 device: str) -> tuple[list[Any], list[float]]:
        from agile_offline.bandits.run import run_loop

        return run_loop(manifest, env, population, options, device)

    def make_env(self, spec: Any, *, base_dir: str | Path | None = None, seed: int | None = None,
                 num_envs: int | None = None) -> Any:
        from agile_offline.bandits.run import make_env

        return make_env(spec, base_dir=base_dir, seed=seed, num_envs=num_envs)


OFFLINE = OfflineParadigm()
BANDITS = BanditParadigm()
