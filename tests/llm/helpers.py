"""Tiny offline models and data for the LLM tests (built in-process; nothing is downloaded)."""

from __future__ import annotations

from typing import Any

LORA = {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
"""Adapters on every linear layer: the tiny base was never pretrained, so the adapters do all the work."""


def tiny(seed: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer): a 2-layer Llama-style model (~120k parameters) and its BPE tokenizer."""
    from agile_llm.tiny import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    return build_model(tokenizer, seed=seed), tokenizer


def register() -> None:
    """Register the LLM paradigm in this process (until the package's entry point is installed)."""
    from agile_core.registry import register_paradigm
    from agile_llm.plugin import LLM_DATASET

    register_paradigm(LLM_DATASET)
