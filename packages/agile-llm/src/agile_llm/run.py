"""What `agile train` needs from an LLM dataset manifest: the dataset, the population on one
shared base, and the loop call (core's trainer calls these hooks)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agile_core.errors import ManifestError, ManifestIssue
from agile_core.specs.manifest import TrainingManifest
from agile_llm.data import DatasetEnv, DatasetError
from agile_llm.models import BaseModelError, SharedBase
from agile_llm.specs import FinetuningNetworkSpec, LLMDatasetEnvSpec
from agile_llm.training import run_llm_dataset

if TYPE_CHECKING:
    from agile_core.training.options import RunOptions

__all__ = ["RolloutSource", "make_env", "make_population", "make_rollout_env", "make_rollout_population",
           "rollout_run_loop", "run_loop"]


def make_env(spec: LLMDatasetEnvSpec, base_dir: str | Path | None = None, seed: int | None = None,
             num_envs: int | None = None) -> DatasetEnv:
    """The dataset of the environment section, split but not yet tokenised (the population's
    tokenizer binds it); a problem is a ManifestError on `environment.dataset`."""
    try:
        return DatasetEnv(spec.dataset, prompt_column=spec.prompt_column, response_column=spec.response_column,
                          chosen_column=spec.chosen_column, rejected_column=spec.rejected_column,
                          prompt_template=spec.prompt_template, test_fraction=spec.test_fraction,
                          split_seed=spec.split_seed, base_dir=base_dir, name=spec.name)
    except DatasetError as error:
        raise ManifestError([ManifestIssue(("environment", "dataset"), str(error))]) from error


def make_population(manifest: TrainingManifest, env: DatasetEnv, hp_config: Any, device: str) -> list[Any]:
    """`pop_size` members of the manifest's algorithm on ONE shared base model, and the dataset
    tokenised with its tokenizer."""
    import importlib

    network = manifest.network
    if not isinstance(network, FinetuningNetworkSpec):
        raise ManifestError([ManifestIssue(("network",), "LLM algorithms need a network section with "
                                                         "pretrained_model_name_or_path")])
    spec = manifest.algorithm
    try:
        base = SharedBase.get(network.pretrained_model_name_or_path, network.lora_config.model_dump(),
                              dtype=network.dtype, device=device, base_dir=manifest.base_dir)
    except BaseModelError as error:
        raise ManifestError([ManifestIssue(("network", "pretrained_model_name_or_path"), str(error))]) from error
    module_name, _, class_name = type(spec).algorithm_class.partition(":")
    klass = getattr(importlib.import_module(module_name), class_name)
    kwargs = dict(spec.hyperparameters())
    if network.max_context_length is not None:
        kwargs["max_length"] = network.max_context_length
    seed = manifest.training.seed
    population = [klass(base, index=i, hp_config=hp_config, device=device,
                        seed=None if seed is None else seed + i, **kwargs)
                  for i in range(manifest.training.pop_size)]
    try:
        env.bind(base.tokenizer, spec.name.lower(), population[0].max_length)
    except DatasetError as error:
        raise ManifestError([ManifestIssue(("environment", "dataset"), str(error))]) from error
    return population


def run_loop(manifest: TrainingManifest, env: DatasetEnv, population: list[Any], options: RunOptions,
             device: str) -> tuple[list[Any], list[float]]:
    """Paradigm hook ``run_loop``: :func:`~agile_llm.training.run_llm_dataset` (`eval_steps` and
    `eval_loop` do not apply: evaluation is one pass over the test split)."""
    return run_llm_dataset(population, env, options)


# ---------------------------------------------------------------------- rollout paradigm (GRPO, LLMPPO, LLMREINFORCE)
class RolloutSource:
    """What ``make_rollout_env`` returns: the environment section resolved (reward function or
    environment class loaded); :meth:`bind` with the population's tokenizer gives the harness
    factory."""

    def __init__(self, spec: Any, base_dir: str | Path | None) -> None:
        from agile_llm.rollout import (
            MissingRewardFunction,
            PromptAnswerEnv,
            load_env_factory,
            load_reward_fn,
        )

        self.spec = spec
        self.name = spec.name
        self.num_envs = 1
        self.max_length: int | None = None
        self.tokenizer: Any = None
        if spec.entrypoint is not None:
            try:
                self.make_text_env = load_env_factory(spec.entrypoint, base_dir, **spec.config)
            except (ImportError, AttributeError, ValueError, FileNotFoundError) as error:
                raise ManifestError([ManifestIssue(("environment", "entrypoint"), str(error))]) from error
            self._check_config()
            return
        try:
            reward_fn = load_reward_fn(str(spec.reward_file_path), spec.reward_fn_name, base_dir)
        except MissingRewardFunction as error:
            raise ManifestError([ManifestIssue(("environment", "reward_fn_name"), str(error))]) from error
        except (ImportError, AttributeError, FileNotFoundError) as error:
            raise ManifestError([ManifestIssue(("environment", "reward_file_path"), str(error))]) from error
        from agile_llm.data import load_rows

        try:
            rows = load_rows(spec.dataset, base_dir=base_dir)
            env = PromptAnswerEnv(rows, reward_fn, prompt_template=spec.prompt_template,
                                  test_fraction=spec.test_fraction, split_seed=spec.split_seed,
                                  prompt_column=spec.prompt_column, answer_column=spec.answer_column)
        except (DatasetError, ValueError) as error:
            raise ManifestError([ManifestIssue(("environment", "dataset"), str(error))]) from error
        self.make_text_env = lambda: _copy_env(env)

    def _check_config(self) -> None:
        """Build one environment now, so that keyword arguments the entrypoint does not take are
        a ManifestError on ``environment.config`` rather than a failure in the first rollout."""
        try:
            self.make_text_env()
        except TypeError as error:
            if "argument" not in str(error):
                raise
            raise ManifestError([ManifestIssue(("environment", "config"), f"{self.spec.entrypoint} cannot be called "
                                               f"with these keyword arguments: {error}", self.spec.config)]) from error

    def reset(self, seed: int | None = None, **_: Any) -> None:
        """Nothing to reset (the loop reseeds torch itself)."""

    def factory(self) -> Any:
        """A fresh harness on a fresh text environment."""
        from agile_llm.rollout import RolloutHarness

        return RolloutHarness(self.make_text_env(), self.tokenizer, max_turns=self.spec.max_turns,
                              max_model_len=self.max_length, io_timeout_s=self.spec.io_timeout_s,
                              chat_template=self.spec.chat_template)


def _copy_env(env: Any) -> Any:
    import copy

    twin = copy.copy(env)
    twin.row = None
    return twin


def make_rollout_env(spec: Any, base_dir: str | Path | None = None, seed: int | None = None,
                     num_envs: int | None = None) -> RolloutSource:
    """The rollout environment section, resolved; problems are ManifestErrors on its fields."""
    return RolloutSource(spec, base_dir)


def check_chat_template(spec: Any, tokenizer: Any) -> None:
    """``environment.chat_template: true`` with a tokenizer lacking a chat template is a
    ManifestError on that field."""
    if not spec.chat_template:
        return
    from agile_llm.rollout import ChatTemplateError, require_chat_template

    try:
        require_chat_template(tokenizer)
    except ChatTemplateError as error:
        raise ManifestError([ManifestIssue(("environment", "chat_template"), str(error))]) from error


def make_rollout_population(manifest: TrainingManifest, env: RolloutSource, hp_config: Any, device: str) -> list[Any]:
    """`pop_size` members of the rollout algorithm on ONE shared base; binds the environment to
    its tokenizer. ``algorithm.use_vllm`` where vLLM cannot run is a ManifestError on that field."""
    if getattr(manifest.algorithm, "use_vllm", False):
        from agile_llm.vllm_backend import VLLMUnavailableError, require_vllm

        try:
            require_vllm()
        except VLLMUnavailableError as error:
            raise ManifestError([ManifestIssue(("algorithm", "use_vllm"), str(error))]) from error
    population = make_population_only(manifest, hp_config, device)
    check_chat_template(env.spec, population[0].tokenizer)
    env.tokenizer = population[0].tokenizer
    env.max_length = population[0].max_length
    return population


def make_population_only(manifest: TrainingManifest, hp_config: Any, device: str) -> list[Any]:
    """The members of the manifest's algorithm on one shared base (no environment binding)."""
    import importlib

    network = manifest.network
    if not isinstance(network, FinetuningNetworkSpec):
        raise ManifestError([ManifestIssue(("network",), "LLM algorithms need a network section with "
                                                         "pretrained_model_name_or_path")])
    spec = manifest.algorithm
    try:
        base = SharedBase.get(network.pretrained_model_name_or_path, network.lora_config.model_dump(),
                              dtype=network.dtype, device=device, base_dir=manifest.base_dir)
    except BaseModelError as error:
        raise ManifestError([ManifestIssue(("network", "pretrained_model_name_or_path"), str(error))]) from error
    module_name, _, class_name = type(spec).algorithm_class.partition(":")
    klass = getattr(importlib.import_module(module_name), class_name)
    kwargs = dict(spec.hyperparameters())
    if network.max_context_length is not None:
        kwargs["max_length"] = network.max_context_length
    seed = manifest.training.seed
    return [klass(base, index=i, hp_config=hp_config, device=device, seed=None if seed is None else seed + i,
                  **kwargs) for i in range(manifest.training.pop_size)]


def rollout_run_loop(manifest: TrainingManifest, env: RolloutSource, population: list[Any], options: RunOptions,
                     device: str) -> tuple[list[Any], list[float]]:
    """Paradigm hook ``run_loop`` of the rollout paradigm:
    :func:`~agile_llm.rollout_training.run_llm_rollout` with the environment section's turns,
    solved reward, I/O deadline and evaluation episodes (`eval_steps` does not apply)."""
    from agile_llm.rollout_training import RolloutSettings, run_llm_rollout

    settings = RolloutSettings(max_turns=env.spec.max_turns, max_reward=env.spec.max_reward,
                               io_timeout_s=env.spec.io_timeout_s, eval_episodes=env.spec.eval_episodes)
    return run_llm_rollout(population, env.factory, manifest.environment.name, options, settings)
