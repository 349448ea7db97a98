"""Tiny offline models and datasets for examples, tests and docs (nothing is downloaded).

* :func:`build_tokenizer`: a byte-level BPE tokenizer trained in-process on the task texts, with
  ``<s>``, ``</s>`` and ``<pad>`` special tokens;
* :func:`build_model`: a randomly initialised Llama-style causal LM from a config;
* :func:`number_rows` / :func:`preference_rows`: a deterministic task (number words to digits:
  ``"two seven"`` -> ``"2 7"``) as SFT rows and as DPO pairs (rejected: one digit wrong);
* :func:`answer_rows` / :func:`digit_reward`: the same task for rollouts (GRPO), with its reward;
* :class:`NumberDialogueEnv`: the same task as a multi-turn text environment (one number word
  per turn, each answer scored by :func:`digit_reward`);
* :func:`write_tiny` writes all of it to a folder (what ``configs/llm/make_tiny.py`` runs).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

__all__ = ["NumberDialogueEnv", "answer_rows", "build_model", "build_tokenizer", "digit_reward", "number_rows", "preference_rows",
           "write_tiny"]

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
PROMPT_TEMPLATE = "{prompt} ="


def number_rows(length: int = 2) -> list[dict[str, str]]:
    """Every sequence of `length` number words with its digits: ``{"prompt", "response"}``."""
    return [{"prompt": " ".join(WORDS[d] for d in digits), "response": " ".join(str(d) for d in digits)}
            for digits in itertools.product(range(10), repeat=length)]


def answer_rows(length: int = 2) -> list[dict[str, str]]:
    """The number task as rollout rows: ``{"prompt", "answer"}`` (for :func:`digit_reward`)."""
    return [{"prompt": row["prompt"], "answer": row["response"]} for row in number_rows(length)]


def digit_reward(completion: str, answer: str, prompt: str = "") -> float:
    """Reward of the number task in 0..1: 0.5 when the completion starts with a digit, plus 0.5
    when that digit is the answer's first one (dense enough for GRPO on an untrained model)."""
    text = completion.strip()
    if not text or not text[0].isdigit():
        return 0.0
    return 1.0 if text[0] == answer.strip()[:1] else 0.5


class NumberDialogueEnv:
    """The number task as a multi-turn text environment: the first observation names a number
    word (``"seven ="``), each policy turn answers it and earns :func:`digit_reward` against that
    word's digit, and the feedback names the next word (``" two ="``) until `turns` words are
    answered. An episode is one sequence of `turns` digits: ``reset(seed)`` picks the sequence
    ``seed`` (modulo the split's size) of the training split, or of the held-out split with
    ``options={"split": "test"}``; ``num_test`` is the held-out split's size.

    Args:
        turns: Words per episode (policy turns), 1 to 4.
        test_fraction: Share of the ``10 ** turns`` sequences held out for evaluation.
        split_seed: Seed of the deterministic train/test split.
    """

    def __init__(self, turns: int = 2, test_fraction: float = 0.2, split_seed: int = 0) -> None:
        import random

        if not 1 <= int(turns) <= 4:
            raise ValueError(f"turns must be 1 to 4, got {turns!r}")
        if not 0.0 < float(test_fraction) < 1.0:
            raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
        sequences = list(itertools.product(range(10), repeat=int(turns)))
        random.Random(split_seed).shuffle(sequences)
        held_out = min(max(1, round(test_fraction * len(sequences))), len(sequences) - 1)
        self.test_sequences, self.train_sequences = sequences[:held_out], sequences[held_out:]
        self.digits: tuple[int, ...] = ()
        self.turn = 0

    @property
    def num_test(self) -> int:
        """Held-out sequences (one evaluation episode each)."""
        return len(self.test_sequences)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> str:
        """Start the sequence `seed` of the split in ``options["split"]`` (default ``train``)."""
        split = (options or {}).get("split", "train")
        sequences = self.test_sequences if split == "test" else self.train_sequences
        self.digits, self.turn = sequences[int(seed or 0) % len(sequences)], 0
        return f"{WORDS[self.digits[0]]} ="

    def step(self, text: str) -> tuple[str | None, float, bool, bool, dict[str, Any]]:
        """Score the answer to the current word; name the next one, or end the episode."""
        if not self.digits:
            raise RuntimeError("step() before reset()")
        reward = digit_reward(text, str(self.digits[self.turn]))
        self.turn += 1
        if self.turn == len(self.digits):
            return None, reward, True, False, {}
        return f" {WORDS[self.digits[self.turn]]} =", reward, False, False, {}


def preference_rows(length: int = 2, seed: int = 0) -> list[dict[str, str]]:
    """DPO pairs of the number task: chosen is the right answer, rejected has its first digit
    replaced by a wrong one (seeded)."""
    import random

    rng = random.Random(seed)
    rows = []
    for row in number_rows(length):
        digits = row["response"].split()
        wrong = list(digits)
        wrong[0] = str((int(digits[0]) + rng.randint(1, 9)) % 10)
        rows.append({"prompt": row["prompt"], "chosen": row["response"], "rejected": " ".join(wrong)})
    return rows


def build_tokenizer(texts: list[str] | None = None, vocab_size: int = 300) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on `texts` (default: the task)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if texts is None:
        texts = [f"{r['prompt']} = {r['response']}" for r in number_rows()]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def build_model(tokenizer: Any, hidden_size: int = 64, num_layers: int = 2, intermediate_size: int | None = None,
                num_heads: int = 4, seed: int = 0, vocab_size: int | None = None, init_std: float = 0.2) -> Any:
    """A Llama-style causal LM with random weights (seeded), sized for `tokenizer`. `init_std` is
    larger than Llama's 0.02 so that LoRA adapters alone (the output head stays frozen) can
    reach confident predictions on a model that was never pretrained."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size or len(tokenizer), hidden_size=hidden_size,
                         intermediate_size=intermediate_size or 2 * hidden_size, num_hidden_layers=num_layers,
                         num_attention_heads=num_heads, num_key_value_heads=num_heads, max_position_embeddings=256,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
                         initializer_range=init_std)
    return LlamaForCausalLM(config).eval()


def write_tiny(out_dir: str | Path, seed: int = 0) -> Path:
    """Write ``model/`` (model and tokenizer), ``sft.jsonl``, ``dpo.jsonl`` and ``rollout.jsonl``
    (prompts and answers, for GRPO with :func:`digit_reward`) under `out_dir`."""
    out = Path(out_dir)
    (out / "model").mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    build_model(tokenizer, seed=seed).save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    for name, rows in (("sft.jsonl", number_rows()), ("dpo.jsonl", preference_rows(seed=seed)),
                       ("rollout.jsonl", answer_rows())):
        (out / name).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return out
