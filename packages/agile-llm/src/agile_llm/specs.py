"""Registered manifest sections of the LLM dataset paradigm (import no torch).

* ``network``: :class:`FinetuningNetworkSpec` (pretrained model and LoRA settings);
* ``environment``: :class:`LLMDatasetEnvSpec` (local dataset files, columns, template, split);
* ``algorithm``: :class:`SFTSpec` and :class:`DPOSpec`.

Default choices (AgileRL's ALGORITHMS.md has none for LLMs): learning rates are the usual LoRA
ranges (SFT 2e-4, DPO 5e-5: preference optimisation drifts from the reference quickly), DPO's
``beta = 0.1`` is the value of the DPO paper, LoRA ``r = 16, alpha = 32`` (scale 2) is the common
middle ground, batches of 8 fit a 0.5B model on one consumer GPU at 512 tokens.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from agile_core.specs._base import Spec, field_error
from agile_core.specs.algorithm import AlgorithmSpec
from agile_core.specs.env import EnvSpec

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
NonNegative = Annotated[float, Field(ge=0.0)]

__all__ = ["DPOSpec", "FinetuningNetworkSpec", "GRPOSpec", "LLMDatasetEnvSpec", "LLMRolloutEnvSpec", "LoraConfigSpec", "SFTSpec"]


class LoraConfigSpec(Spec):
    """LoRA adapter settings shared by every member of a population (each member has its own
    adapter weights; these shapes are fixed: no architecture mutation for LLMs)."""

    lora_r: PositiveInt = 16
    """Rank of the low-rank update matrices."""
    lora_alpha: PositiveInt = 32
    """Scale numerator: the update is multiplied by ``lora_alpha / lora_r``."""
    target_modules: list[str] | None = None
    """Names of the linear modules that get adapters (e.g. ``[q_proj, v_proj]``); null uses peft's
    default for the architecture (attention query and value projections for Llama/Qwen2,
    ``c_attn`` for GPT-2)."""
    lora_dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05
    """Dropout on the adapter input during training."""
    task_type: Literal["CAUSAL_LM"] = "CAUSAL_LM"
    """peft task type; only causal language models are supported."""


class FinetuningNetworkSpec(Spec):
    """The ``network`` section of LLM algorithms: which pretrained model, and its LoRA adapters."""

    pretrained_model_name_or_path: str = Field(min_length=1)
    """A local directory written by ``save_pretrained`` (relative paths are relative to the
    manifest) or a model id already in the local Hugging Face cache. Nothing is downloaded."""
    max_context_length: PositiveInt | None = None
    """Longest sequence (prompt plus response, in tokens) fed to the model; longer examples lose
    prompt tokens from the left first. Null: the algorithm's ``max_length``."""
    lora_config: LoraConfigSpec = Field(default_factory=LoraConfigSpec)
    """LoRA settings (see :class:`LoraConfigSpec`)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Data type of the frozen base weights (adapters train in float32)."""


class LLMDatasetEnvSpec(EnvSpec):
    """The ``environment`` section of dataset (teacher-forced) LLM training: local files of
    prompts with responses (SFT) or with chosen/rejected responses (DPO)."""

    name: str = Field(default="dataset", min_length=1)
    """Label of the run (logs, progress bar)."""
    num_envs: int = Field(default=1, ge=1, le=1)
    """Always 1: a dataset is not vectorised."""
    env_type: Literal["dataset"] | None = None
    """Inferred from the algorithm (SFT and DPO train on datasets); only ``dataset`` exists."""
    dataset: str | list[str] = Field(min_length=1)
    """JSONL, CSV or Parquet file(s), relative to the manifest; several files are concatenated."""
    prompt_column: str = "prompt"
    """Column holding the prompt text."""
    response_column: str = "response"
    """Column holding the target response (SFT)."""
    chosen_column: str = "chosen"
    """Column holding the preferred response (DPO)."""
    rejected_column: str = "rejected"
    """Column holding the dispreferred response (DPO)."""
    prompt_template: str | None = None
    """Python format string applied to each prompt, with ``{prompt}`` (and any other column by
    name), e.g. ``"Question: {prompt}\\nAnswer:"``. Null: the prompt as is."""
    test_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.1
    """Share of the rows held out for evaluation (fitness); at least one row each side."""
    split_seed: int = 0
    """Seed of the deterministic train/test split."""

    @model_validator(mode="after")
    def _template_has_prompt(self) -> LLMDatasetEnvSpec:
        if self.prompt_template is not None and "{prompt}" not in self.prompt_template:
            raise field_error("prompt_template", "must contain the placeholder {prompt}")
        return self


class _LLMSpec(AlgorithmSpec):
    """Fields every dataset LLM algorithm shares."""

    lr: PositiveFloat = 2e-4
    """Adam learning rate of the member's LoRA adapter."""
    batch_size: PositiveInt = 8
    """Examples (SFT) or preference pairs (DPO) per learning step."""
    max_length: PositiveInt = 512
    """Longest tokenised example (prompt plus response); ``network.max_context_length`` wins
    when set."""
    max_grad_norm: PositiveFloat | None = 1.0
    """Gradient-norm clip of each update (null: no clipping)."""

    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr",)
    default_evo_steps: ClassVar[int] = 50


class SFTSpec(_LLMSpec):
    """Supervised finetuning: cross-entropy on the response tokens only (prompt tokens are
    context). Fitness: minus the mean per-token loss on the test split."""

    name: Literal["SFT"] = "SFT"
    """Algorithm name."""

    algorithm_class: ClassVar[str] = "agile_llm.sft:SFT"


class DPOSpec(_LLMSpec):
    """Direct Preference Optimisation (Rafailov et al., 2023) against the frozen base (adapters
    disabled) as reference. Fitness: preference accuracy on held-out pairs."""

    name: Literal["DPO"] = "DPO"
    """Algorithm name."""
    lr: PositiveFloat = 5e-5
    """Adam learning rate of the member's LoRA adapter."""
    beta: PositiveFloat = 0.1
    """Inverse temperature of the implicit reward ``beta * (log pi - log pi_ref)``: larger keeps
    the policy closer to the reference."""
    nll_alpha: NonNegative = 0.0
    """Weight of an extra negative log-likelihood term on the chosen responses (per token, as in
    RPO); 0 disables it."""

    algorithm_class: ClassVar[str] = "agile_llm.dpo:DPO"
    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr", "beta")


class GRPOSpec(_LLMSpec):
    """Group Relative Policy Optimisation (Shao et al., 2024) on rollout environments, with a
    clipped ratio and a KL penalty to the frozen base (adapters disabled). Fitness: mean return
    of greedy episodes on the held-out prompts."""

    name: Literal["GRPO"] = "GRPO"
    """Algorithm name."""
    lr: PositiveFloat = 1e-5
    """Adam learning rate of the member's LoRA adapter (RL finetuning of pretrained models uses
    1e-6..1e-5; tiny untrained models need far more)."""
    batch_size: PositiveInt = 4
    """Prompts per learning step (each sampled ``group_size`` times)."""
    max_length: PositiveInt = 1024
    """Longest transcript in tokens (prompt, completions and feedback of every turn): an episode
    whose next turn would not fit ends with ``truncated``; ``network.max_context_length`` wins."""
    beta: NonNegative = 0.04
    """Weight of the KL penalty to the reference (the DeepSeekMath GRPO value); 0 disables it."""
    clip_coef: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.2
    """Ratio clip: the objective ignores ratio moves beyond ``1 +- clip_coef``."""
    group_size: Annotated[int, Field(ge=2)] = 8
    """Completions sampled per prompt; advantages are relative to the group."""
    temperature: PositiveFloat = 1.0
    """Sampling temperature of training rollouts (evaluation is greedy)."""
    max_new_tokens: PositiveInt = 64
    """Tokens generated per turn at most."""
    update_epochs: PositiveInt = 1
    """Updates on each batch of episodes (the ratio departs from 1 after the first)."""

    algorithm_class: ClassVar[str] = "agile_llm.grpo:GRPO"
    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr", "beta")


class LLMRolloutEnvSpec(EnvSpec):
    """The ``environment`` section of rollout (online RL) LLM training: a single-turn dataset of
    prompts and answers with a reward function, or a multi-turn environment by entrypoint."""

    name: str = Field(default="rollout", min_length=1)
    """Label of the run (logs, progress bar)."""
    num_envs: int = Field(default=1, ge=1, le=1)
    """Always 1 (the group size sets how many episodes run at once)."""
    env_type: Literal["rollout"] | None = None
    """Inferred from the algorithm (GRPO trains on rollouts); only ``rollout`` exists."""
    dataset: str | list[str] | None = None
    """Single-turn: JSONL, CSV or Parquet file(s) of prompts and answers, relative to the manifest."""
    prompt_column: str = "prompt"
    """Column holding the prompt text."""
    answer_column: str = "answer"
    """Column holding the reference answer passed to the reward function."""
    prompt_template: str | None = None
    """Format string with ``{prompt}`` (and other columns by name). Null: the prompt as is."""
    reward_file_path: str | None = None
    """Single-turn: a ``.py`` file (relative to the manifest) or an importable module name
    (e.g. ``agile_llm.tiny``) holding the reward function."""
    reward_fn_name: str = "reward_fn"
    """Name of ``reward_fn(completion, answer, prompt) -> float`` in ``reward_file_path``."""
    entrypoint: str | None = None
    """Multi-turn: ``module:attr`` (module may be a ``.py`` file relative to the manifest) of a
    text environment class or zero-argument factory; replaces ``dataset``."""
    max_turns: PositiveInt = 1
    """Policy turns per episode at most."""
    io_timeout_s: PositiveFloat | None = 600.0
    """Deadline of each environment call in seconds (TimeoutError); null: none."""
    max_reward: float | None = None
    """Return counted as solved (logs the share of evaluation episodes reaching it)."""
    test_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.1
    """Share of the dataset rows held out for evaluation (fitness)."""
    split_seed: int = 0
    """Seed of the deterministic train/test split."""

    @model_validator(mode="after")
    def _one_source(self) -> LLMRolloutEnvSpec:
        if (self.dataset is None) == (self.entrypoint is None):
            raise field_error("dataset", "give exactly one of dataset (single turn) or entrypoint (multi-turn)")
        if self.dataset is not None and self.reward_file_path is None:
            raise field_error("reward_file_path", "a dataset needs a reward file (reward_file_path)")
        if self.prompt_template is not None and "{prompt}" not in self.prompt_template:
            raise field_error("prompt_template", "must contain the placeholder {prompt}")
        return self
