"""agile-llm: evolve populations of LoRA-finetuned language models that share one frozen base.

Datasets: SFT and DPO (``train_llm_dataset`` over a ``DatasetEnv``). Rollouts: GRPO
(``train_llm_rollout`` over ``RolloutHarness`` environments).
Public names load on first use (importing the package imports neither torch nor vllm)."""

from agile_core.lazy import lazy_exports

_NAMES = {
    "SFT": "agile_llm.sft",
    "DPO": "agile_llm.dpo",
    "dpo_loss": "agile_llm.dpo",
    "LoRAFinetuner": "agile_llm.algorithm",
    "generate_greedy": "agile_llm.algorithm",
    "DatasetEnv": "agile_llm.data",
    "DatasetError": "agile_llm.data",
    "load_rows": "agile_llm.data",
    "SharedBase": "agile_llm.models",
    "BaseModelError": "agile_llm.models",
    "train_llm_dataset": "agile_llm.training",
    "FinetuningNetworkSpec": "agile_llm.specs",
    "LoraConfigSpec": "agile_llm.specs",
    "LLMDatasetEnvSpec": "agile_llm.specs",
    "SFTSpec": "agile_llm.specs",
    "DPOSpec": "agile_llm.specs",
    "GRPO": "agile_llm.grpo",
    "group_advantages": "agile_llm.grpo",
    "GRPOSpec": "agile_llm.specs",
    "LLMRolloutEnvSpec": "agile_llm.specs",
    "RolloutHarness": "agile_llm.rollout",
    "PromptAnswerEnv": "agile_llm.rollout",
    "Episode": "agile_llm.rollout",
    "load_reward_fn": "agile_llm.rollout",
    "load_env_factory": "agile_llm.rollout",
    "train_llm_rollout": "agile_llm.rollout_training",
    "CompletionLoggingConfig": "agile_llm.rollout_training",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
