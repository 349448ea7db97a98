"""agile-llm: evolve populations of LoRA-finetuned language models that share one frozen base.

Datasets: SFT and DPO (``train_llm_dataset`` over a ``DatasetEnv``). Rollouts: GRPO, LLMPPO and
LLMREINFORCE (``train_llm_rollout`` over ``RolloutHarness`` environments; Hugging Face
``generate`` or, with ``use_vllm``, the optional vLLM backend).
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
    "LLMPPO": "agile_llm.llm_ppo",
    "LLMPPOSpec": "agile_llm.specs",
    "turn_gae": "agile_llm.llm_ppo",
    "LLMREINFORCE": "agile_llm.reinforce",
    "LLMREINFORCESpec": "agile_llm.specs",
    "baseline_advantages": "agile_llm.reinforce",
    "RolloutLearner": "agile_llm.rollout_learner",
    "VLLMConfigSpec": "agile_llm.specs",
    "VLLMUnavailableError": "agile_llm.vllm_backend",
    "truncated_is_weights": "agile_llm.vllm_backend",
    "Completion": "agile_llm.rollout",
    "LLMRolloutEnvSpec": "agile_llm.specs",
    "RolloutHarness": "agile_llm.rollout",
    "PromptAnswerEnv": "agile_llm.rollout",
    "Episode": "agile_llm.rollout",
    "load_reward_fn": "agile_llm.rollout",
    "load_env_factory": "agile_llm.rollout",
    "train_llm_rollout": "agile_llm.rollout_training",
    "CompletionLoggingConfig": "agile_llm.rollout_training",
    "evaluate_checkpoint": "agile_llm.evaluation",
    "EvaluationError": "agile_llm.evaluation",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
