"""Registered manifest sections of the LLM dataset and rollout paradigms (import no torch).

* ``network``: :class:`FinetuningNetworkSpec` (pretrained model and LoRA settings);
* ``environment``: :class:`LLMDatasetEnvSpec` (local dataset files, columns, template, split);
* ``algorithm``: :class:`SFTSpec` and :class:`DPOSpec` (datasets); :class:`GRPOSpec`,
  :class:`LLMPPOSpec` and :class:`LLMREINFORCESpec` (rollouts, with :class:`VLLMConfigSpec`).

Default choices (AgileRL's ALGORITHMS.md has none for LLMs): learning rates are the usual LoRA
ranges (SFT 2e-4, DPO 5e-5: preference optimisation drifts from the reference quickly), DPO's
``beta = 0.1`` is the value of the DPO paper, LoRA ``r = 16, alpha = 32`` (scale 2) is the common
middle ground, batches of 8 fit a 0.5B model on one consumer GPU at 512 tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from agile_core.specs._base import PrintableStr, Spec, field_error
from agile_core.specs.algorithm import MUTABLE, AlgorithmSpec, UpdateEpochs
from agile_core.specs.env import EnvSpec

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
NonNegative = Annotated[float, Field(ge=0.0)]

__all__ = ["DPOSpec", "FinetuningNetworkSpec", "GRPOSpec", "LLMDatasetEnvSpec", "LLMPPOSpec", "LLMREINFORCESpec",
           "LLMRolloutEnvSpec", "LoraConfigSpec", "SFTSpec", "VLLMConfigSpec"]


class LoraConfigSpec(Spec):
    """LoRA adapter settings (passed to ``peft.LoraConfig``, with ``bias="none"``) shared by every
    member of a population (each member has its own adapter weights; these shapes are fixed: no
    architecture mutation for LLMs)."""

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

    name: PrintableStr = Field(default="dataset", min_length=1)
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

    lr: Annotated[PositiveFloat, MUTABLE] = 2e-4
    """Adam learning rate of the member's LoRA adapter."""
    batch_size: Annotated[PositiveInt, MUTABLE] = 8
    """Examples (SFT) or preference pairs (DPO) per learning step."""
    max_length: Annotated[PositiveInt, MUTABLE] = 512
    """Longest tokenised example (prompt plus response); ``network.max_context_length`` wins
    when set."""
    max_grad_norm: Annotated[PositiveFloat | None, MUTABLE] = 1.0
    """Gradient-norm clip of each update (null: no clipping)."""

    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr",)
    default_evo_steps: ClassVar[int] = 50
    mutation_operators: ClassVar[frozenset[str] | None] = frozenset({"no_mut", "rl_hp_mut"})
    """Members are LoRA adapters on a fixed pretrained model: no architecture, activation or
    weight-noise mutation, so those weights resolve to 0."""


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
    lr: Annotated[PositiveFloat, MUTABLE] = 5e-5
    """Adam learning rate of the member's LoRA adapter."""
    beta: Annotated[PositiveFloat, MUTABLE] = 0.1
    """Inverse temperature of the implicit reward ``beta * (log pi - log pi_ref)``: larger keeps
    the policy closer to the reference."""
    nll_alpha: Annotated[NonNegative, MUTABLE] = 0.0
    """Weight of an extra negative log-likelihood term on the chosen responses (per token, as in
    RPO); 0 disables it."""

    reference: Literal["base", "initial"] = "base"
    """Reference policy of the implicit reward: ``base``, the shared base with adapters disabled;
    ``initial``, a frozen copy of the member's adapter as it was when the member was created or
    loaded, kept as a separate non-trainable adapter on the same shared base (one more adapter
    per member; cloned with the member and saved in its checkpoints; a checkpoint saved without
    one loads with the reference set to a copy of the loaded adapter)."""

    algorithm_class: ClassVar[str] = "agile_llm.dpo:DPO"
    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr", "beta")


class VLLMConfigSpec(Spec):
    """Settings of the vLLM generation engine (``algorithm.vllm_config``; used only with
    ``use_vllm: true``, which needs the extra ``pip install 'agile-llm[vllm]'`` and a CUDA GPU).
    One engine serves the whole population: it holds the shared base once, with LoRA enabled, and
    each member's adapter is synced to it before the member's rollouts."""

    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = 0.3
    """Share of the GPU memory vLLM may take (weights and KV cache). Lower than vLLM's own 0.9
    because the trainer's copy of the base, the adapters, optimizer states and activations share
    the GPU."""
    max_num_seqs: PositiveInt = 64
    """Sequences vLLM schedules at once (at least ``batch_size * group_size`` avoids queueing)."""
    tensor_parallel_size: PositiveInt = 1
    """GPUs the engine shards the base across."""
    max_model_len: PositiveInt | None = None
    """Context length of the engine in tokens; null: the algorithm's ``max_length``."""
    max_lora_rank: PositiveInt | None = None
    """Largest adapter rank the engine accepts; null: ``network.lora_config.lora_r`` rounded up
    to a rank vLLM supports (8, 16, 32, ...)."""
    max_loras: PositiveInt = 1
    """Adapters resident in the engine at once (one member's rollouts run at a time)."""
    enforce_eager: bool = False
    """Skip CUDA graph capture (starts faster, generates slower)."""
    seed: int | None = None
    """Seed of the engine's sampler; null: vLLM's default."""
    importance_sampling_cap: PositiveFloat = 2.0
    """Cap ``C`` of the truncated importance weight ``min(exp(log p_trainer - log p_vllm), C)``
    that multiplies each generated token's policy loss: the engine's kernels give slightly
    different probabilities than the trainer's forward, so its samples are mildly off-policy;
    the cap bounds the variance a rare large ratio would add (2.0, the value of Yao et al.,
    2025, "Your efficient RL framework secretly brings you off-policy RL training")."""


class _RolloutSpec(_LLMSpec):
    """Fields every rollout (online RL) LLM algorithm shares: sampling, the KL penalty and the
    generation backend."""

    lr: Annotated[PositiveFloat, MUTABLE] = 1e-5
    """Adam learning rate of the member's LoRA adapter (RL finetuning of pretrained models uses
    1e-6..1e-5; tiny untrained models need far more)."""
    batch_size: Annotated[PositiveInt, MUTABLE] = 4
    """Prompts per learning step (each sampled ``group_size`` times)."""
    max_length: Annotated[PositiveInt, MUTABLE] = 1024
    """Longest transcript in tokens (prompt, completions and feedback of every turn): an episode
    whose next turn would not fit ends with ``truncated``; ``network.max_context_length`` wins."""
    beta: Annotated[NonNegative, MUTABLE] = 0.04
    """Weight of the KL penalty to the reference (the frozen base, adapters disabled), with the
    ``exp(q - p) - (q - p) - 1`` estimate per generated token (the DeepSeekMath value); 0
    disables it."""
    temperature: Annotated[PositiveFloat, MUTABLE] = 1.0
    """Sampling temperature of training rollouts (evaluation is greedy)."""
    max_new_tokens: Annotated[PositiveInt, MUTABLE] = 64
    """Tokens generated per turn at most."""
    use_vllm: bool = False
    """Generate rollouts with vLLM instead of Hugging Face ``generate`` (needs the extra
    ``pip install 'agile-llm[vllm]'`` and a CUDA GPU). Only the member's adapter is synced to the
    engine before each rollout, and the policy loss is importance-corrected between the engine's
    and the trainer's log-probs (see ``vllm_config.importance_sampling_cap``)."""
    vllm_config: VLLMConfigSpec = Field(default_factory=VLLMConfigSpec)
    """vLLM engine settings (see :class:`VLLMConfigSpec`); ignored unless ``use_vllm``."""
    reference: Literal["base", "initial"] = "base"
    """Reference policy of the KL penalty: ``base``, the shared base with adapters disabled;
    ``initial``, a frozen copy of the member's adapter as it was when the member was created or
    loaded, kept as a separate non-trainable adapter on the same shared base (one more adapter
    per member; cloned with the member and saved in its checkpoints; a checkpoint saved without
    one loads with the reference set to a copy of the loaded adapter)."""

    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr", "beta")


class GRPOSpec(_RolloutSpec):
    """Group Relative Policy Optimisation (Shao et al., 2024) on rollout environments, with a
    clipped ratio and a KL penalty to the frozen base (adapters disabled). Fitness: mean return
    of greedy episodes on the held-out prompts."""

    name: Literal["GRPO"] = "GRPO"
    """Algorithm name."""
    clip_coef: Annotated[float, Field(gt=0.0, lt=1.0), MUTABLE] = 0.2
    """Ratio clip: the objective ignores ratio moves beyond ``1 +- clip_coef``."""
    group_size: Annotated[int, Field(ge=2), MUTABLE] = 8
    """Completions sampled per prompt; advantages are relative to the group."""
    update_epochs: Annotated[UpdateEpochs, MUTABLE] = 1
    """Updates on each batch of episodes (the ratio departs from 1 after the first)."""

    algorithm_class: ClassVar[str] = "agile_llm.grpo:GRPO"


class LLMREINFORCESpec(_RolloutSpec):
    """REINFORCE with a baseline on rollout environments (one on-policy update per batch; with
    ``baseline: group`` it is RLOO, Ahmadian et al., 2024), with a KL penalty to the frozen base.
    Fitness: mean return of greedy episodes on the held-out prompts."""

    name: Literal["LLMREINFORCE"] = "LLMREINFORCE"
    """Algorithm name."""
    group_size: Annotated[PositiveInt, MUTABLE] = 4
    """Completions sampled per prompt (the ``group`` baseline needs at least 2)."""
    baseline: Annotated[Literal["group", "batch", "running"], MUTABLE] = "group"
    """What is subtracted from an episode's return: ``group``, the mean return of the other
    episodes of the same prompt (leave-one-out: unbiased, and it removes the prompt's
    difficulty); ``batch``, the mean return of the step's episodes; ``running``, an exponential
    moving average of past steps' mean returns (``baseline_decay``; saved in checkpoints)."""
    baseline_decay: Annotated[float, Field(ge=0.0, lt=1.0), MUTABLE] = 0.9
    """Weight of the old value in the ``running`` baseline's update."""

    algorithm_class: ClassVar[str] = "agile_llm.reinforce:LLMREINFORCE"

    @model_validator(mode="after")
    def _group_baseline_needs_a_group(self) -> LLMREINFORCESpec:
        if self.baseline == "group" and self.group_size < 2:
            raise field_error("group_size", "the group baseline (leave-one-out) needs group_size >= 2")
        return self


class LLMPPOSpec(_RolloutSpec):
    """PPO on rollout environments: the actor is the member's LoRA adapter; the critic is a
    second LoRA adapter on the same frozen base with a linear value head on its last hidden
    state. Advantages come from GAE over turns (per-turn rewards); clipped ratio, KL penalty to
    the frozen base. Fitness: mean return of greedy episodes on the held-out prompts."""

    name: Literal["LLMPPO"] = "LLMPPO"
    """Algorithm name."""
    critic_lr: Annotated[PositiveFloat, MUTABLE] = 1e-4
    """Adam learning rate of the critic (its adapter and value head): the value head starts
    from zero, so it gets a larger rate than the actor."""
    batch_size: Annotated[PositiveInt, MUTABLE] = 8
    """Prompts per learning step (each sampled ``group_size`` times)."""
    group_size: Annotated[PositiveInt, MUTABLE] = 1
    """Episodes sampled per prompt (the critic is the baseline, so 1 suffices)."""
    clip_coef: Annotated[float, Field(gt=0.0, lt=1.0), MUTABLE] = 0.2
    """Ratio clip: the objective ignores ratio moves beyond ``1 +- clip_coef``."""
    gamma: Annotated[float, Field(ge=0.0, le=1.0), MUTABLE] = 1.0
    """Discount per turn (1.0: an episode's turns count alike, usual for LLM tasks)."""
    gae_lambda: Annotated[float, Field(ge=0.0, le=1.0), MUTABLE] = 0.95
    """GAE's lambda over turns (1: Monte Carlo returns minus the value; 0: one-turn TD)."""
    update_epochs: Annotated[UpdateEpochs, MUTABLE] = 2
    """Actor and critic updates on each batch of episodes."""
    normalize_advantages: Annotated[bool, MUTABLE] = True
    """Whiten the step's turn advantages (zero mean, unit standard deviation)."""

    algorithm_class: ClassVar[str] = "agile_llm.llm_ppo:LLMPPO"
    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr", "critic_lr", "beta")


class LLMRolloutEnvSpec(EnvSpec):
    """The ``environment`` section of rollout (online RL) LLM training: a single-turn dataset of
    prompts and answers with a reward function, or a multi-turn environment by entrypoint."""

    name: PrintableStr = Field(default="rollout", min_length=1)
    """Label of the run (logs, progress bar)."""
    num_envs: int = Field(default=1, ge=1, le=1)
    """Always 1 (the group size sets how many episodes run at once)."""
    env_type: Literal["rollout"] | None = None
    """Inferred from the algorithm (GRPO, LLMPPO and LLMREINFORCE train on rollouts); only
    ``rollout`` exists."""
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
    text environment class or factory, called with ``config`` as keyword arguments for every
    episode; replaces ``dataset``."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Multi-turn: keyword arguments of the ``entrypoint`` class or factory (as the Gymnasium and
    PettingZoo sections' ``config``)."""
    eval_episodes: PositiveInt | None = None
    """Greedy evaluation episodes per member per evaluation (reset with seeds 0, 1, ... and
    ``options={"split": "test"}``). Null: the environment's ``num_test`` attribute when it has
    one (a dataset: its held-out rows), else 1."""
    max_turns: PositiveInt = 1
    """Policy turns per episode at most."""
    chat_template: bool = False
    """Render the conversation through the tokenizer's chat template (``apply_chat_template``):
    the first observation as a user message with the generation prompt, each completion as an
    assistant message, each later feedback as another user message; the transcript stays one
    continuous token sequence and only generated tokens are trained. False: plain text (BOS, the
    prompt, feedback as is). Needs a tokenizer with a chat template."""
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

    def field_warnings(self) -> list[tuple[tuple[str | int, ...], str, Any]]:
        """``config`` with a dataset (it configures an ``entrypoint`` environment) is not used."""
        warnings = super().field_warnings()
        if self.config and self.entrypoint is None:
            warnings.append((("config",), "only used with entrypoint (multi-turn); ignored with a dataset",
                             self.config))
        return warnings

    def file_issues(self, base_dir: Path) -> list[tuple[tuple[str, ...], str, Any]]:
        """A reward function or environment attribute that the named file or module does not
        define (read without running it; files and modules that cannot be found or read are
        left to training)."""
        from agile_llm.source_check import missing_attribute

        issues: list[tuple[tuple[str, ...], str, Any]] = []
        if (self.reward_file_path is not None and self.dataset is not None
                and missing_attribute(self.reward_file_path, self.reward_fn_name, base_dir)):
            issues.append((("reward_fn_name",), f"{self.reward_file_path} has no function {self.reward_fn_name!r}",
                           self.reward_fn_name))
        if self.entrypoint is not None:
            module, _, attr = self.entrypoint.rpartition(":")
            if module and attr and missing_attribute(module, attr, base_dir):
                issues.append((("entrypoint",), f"{module} has no attribute {attr!r}", self.entrypoint))
        return issues
