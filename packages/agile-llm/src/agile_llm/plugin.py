"""Entry points of the LLM paradigms, dataset (SFT, DPO) and rollout (GRPO, LLMPPO, LLMREINFORCE);
import no torch, only specs."""

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

LLM_DATASET = Paradigm(
    name="llm_dataset",
    distribution="agile-llm",
    algorithms=(SFTSpec, DPOSpec),
    env_spec=LLMDatasetEnvSpec,
    network_spec=FinetuningNetworkSpec,
    hooks={
        "run_loop": "agile_llm.run:run_loop",
        "make_env": "agile_llm.run:make_env",
        "make_population": "agile_llm.run:make_population",
        "evaluate_checkpoint": "agile_llm.evaluation:evaluate_checkpoint",
    },
)

LLM_ROLLOUT = Paradigm(
    name="llm_rollout",
    distribution="agile-llm",
    algorithms=(GRPOSpec, LLMPPOSpec, LLMREINFORCESpec),
    env_spec=LLMRolloutEnvSpec,
    network_spec=FinetuningNetworkSpec,
    hooks={
        "run_loop": "agile_llm.run:rollout_run_loop",
        "make_env": "agile_llm.run:make_rollout_env",
        "make_population": "agile_llm.run:make_rollout_population",
        "evaluate_checkpoint": "agile_llm.evaluation:evaluate_checkpoint",
    },
)
