"""Entry point of the LLM dataset paradigm (imports no torch: only specs)."""

from agile_core.registry import Paradigm
from agile_llm.specs import DPOSpec, FinetuningNetworkSpec, LLMDatasetEnvSpec, SFTSpec

LLM_DATASET = Paradigm(
    name="llm_dataset",
    distribution="agile-llm",
    algorithms=(SFTSpec, DPOSpec),
    env_spec=LLMDatasetEnvSpec,
    network_spec=FinetuningNetworkSpec,
    hooks={
        "train_loop": "agile_llm.run:train_loop",
        "make_env": "agile_llm.run:make_env",
        "make_population": "agile_llm.run:make_population",
    },
)
