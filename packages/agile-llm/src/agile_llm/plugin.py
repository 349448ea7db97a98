"""Entry points of the LLM paradigms, dataset (SFT, DPO) and rollout (GRPO, LLMPPO, LLMREINFORCE);
import no torch at module level, only specs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agile_core.registry import Paradigm
from agile_llm.specs import (
    DPOSpec,
    FinetuningNetworkSpec,
    GRPOSpec,
    LLMDatasetEnvSpec,
    LLMPPOSpec,
    LLMREINFORCESpec,
    LLMRolloutEnvSpec,
    SFTSpec,
)

if TYPE_CHECKING:
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.training.options import RunOptions


class _LLMParadigm(Paradigm):
    """Language models from Hugging Face configs, finetuned as a population."""

    distribution = "agile-llm"
    network_spec = FinetuningNetworkSpec
    builds_envs = True

    def checkpoint_evaluator(self) -> Callable[..., dict[str, Any]] | None:
        from agile_llm.evaluation import evaluate_checkpoint

        return evaluate_checkpoint


class LLMDatasetParadigm(_LLMParadigm):
    """SFT and DPO: learning from a fixed data set of prompts and responses."""

    name = "llm_dataset"
    algorithms = (SFTSpec, DPOSpec)
    env_spec = LLMDatasetEnvSpec

    def run_loop(self, manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                 device: str) -> tuple[list[Any], list[float]]:
        from agile_llm.run import run_loop

        return run_loop(manifest, env, population, options, device)

    def make_env(self, spec: Any, *, base_dir: str | Path | None = None, seed: int | None = None,
                 num_envs: int | None = None) -> Any:
        from agile_llm.run import make_env

        return make_env(spec, base_dir=base_dir, seed=seed, num_envs=num_envs)

    def make_population(self, manifest: TrainingManifest, env: Any, hp_config: Any,
                        device: str) -> list[Any] | None:
        from agile_llm.run import make_population

        return make_population(manifest, env, hp_config, device)


class LLMRolloutParadigm(_LLMParadigm):
    """GRPO, LLMPPO and LLMREINFORCE: learning from the model's own completions, scored by a reward."""

    name = "llm_rollout"
    algorithms = (GRPOSpec, LLMPPOSpec, LLMREINFORCESpec)
    env_spec = LLMRolloutEnvSpec

    def run_loop(self, manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                 device: str) -> tuple[list[Any], list[float]]:
        from agile_llm.run import rollout_run_loop

        return rollout_run_loop(manifest, env, population, options, device)

    def make_env(self, spec: Any, *, base_dir: str | Path | None = None, seed: int | None = None,
                 num_envs: int | None = None) -> Any:
        from agile_llm.run import make_rollout_env

        return make_rollout_env(spec, base_dir=base_dir, seed=seed, num_envs=num_envs)

    def make_population(self, manifest: TrainingManifest, env: Any, hp_config: Any,
                        device: str) -> list[Any] | None:
        from agile_llm.run import make_rollout_population

        return make_rollout_population(manifest, env, hp_config, device)


LLM_DATASET = LLMDatasetParadigm()
LLM_ROLLOUT = LLMRolloutParadigm()
