"""DatasetEnv: loss masks on response tokens only (token ids), DPO layout, splits, files, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agile_llm.data import IGNORE_INDEX, DatasetEnv, DatasetError, load_rows
from agile_llm.tiny import build_tokenizer, number_rows, preference_rows


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_sft_labels_cover_exactly_the_response_tokens(tokenizer) -> None:
    env = DatasetEnv([{"prompt": "two seven", "response": "2 7"}, {"prompt": "one", "response": "1"}], tokenizer,
                     "sft", prompt_template="{prompt} =", test_fraction=0.5)
    batch = env.collate(env.train + env.test)
    for row, text in enumerate(env.train_rows + env.test_rows):
        prompt = [tokenizer.bos_token_id, *tokenizer.encode(f"{text['prompt']} =", add_special_tokens=False)]
        response = [*tokenizer.encode(text["response"], add_special_tokens=False), tokenizer.eos_token_id]
        ids = batch["input_ids"][row].tolist()
        labels = batch["labels"][row].tolist()
        n = len(prompt) + len(response)
        assert ids[:n] == prompt + response
        assert labels[:len(prompt)] == [IGNORE_INDEX] * len(prompt)  # no loss on the prompt
        assert labels[len(prompt):n] == response  # loss on every response token, EOS included
        assert labels[n:] == [IGNORE_INDEX] * (len(labels) - n)  # nor on padding
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (len(ids) - n)


def test_dpo_batches_put_chosen_rows_first(tokenizer) -> None:
    env = DatasetEnv(preference_rows(), tokenizer, "dpo", test_fraction=0.2)
    batch = env.sample(4, np.random.default_rng(0))
    assert batch["pairs"] == 4 and batch["input_ids"].shape[0] == 8
    for k in range(4):  # same prompt tokens, different responses
        chosen, rejected = batch["labels"][k], batch["labels"][4 + k]
        start = int((chosen != IGNORE_INDEX).nonzero()[0])
        assert batch["input_ids"][k, :start].tolist() == batch["input_ids"][4 + k, :start].tolist()
        assert chosen.tolist() != rejected.tolist()


def test_split_is_deterministic_disjoint_and_sized(tokenizer) -> None:
    rows = number_rows()
    first = DatasetEnv(rows, tokenizer, "sft", test_fraction=0.2, split_seed=3)
    again = DatasetEnv(rows, tokenizer, "sft", test_fraction=0.2, split_seed=3)
    other = DatasetEnv(rows, tokenizer, "sft", test_fraction=0.2, split_seed=4)
    assert first.test_rows == again.test_rows and len(first.test_rows) == 20 and len(first.train_rows) == 80
    assert first.test_rows != other.test_rows
    prompts = {r["prompt"] for r in first.test_rows}
    assert not prompts & {r["prompt"] for r in first.train_rows}


def test_files_jsonl_and_csv_load_alike(tmp_path: Path, tokenizer) -> None:
    rows = number_rows()[:10]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "a.csv").write_text("prompt,response\n" + "".join(f"{r['prompt']},{r['response']}\n" for r in rows))
    assert load_rows("a.jsonl", base_dir=tmp_path) == rows == load_rows(tmp_path / "a.csv")
    assert len(load_rows([tmp_path / "a.jsonl", tmp_path / "a.csv"])) == 20
    env = DatasetEnv("a.csv", tokenizer, "sft", base_dir=tmp_path, test_fraction=0.3)
    assert len(env.train) == 7 and len(env.test) == 3


def test_datasets_object_is_accepted_when_installed(tokenizer) -> None:
    datasets = pytest.importorskip("datasets", reason="the optional `datasets` package is not installed")
    env = DatasetEnv(datasets.Dataset.from_list(number_rows()[:10]), tokenizer, "sft")
    assert len(env.train) + len(env.test) == 10


def test_errors_are_precise(tmp_path: Path, tokenizer) -> None:
    with pytest.raises(DatasetError, match="not found"):
        load_rows(tmp_path / "missing.jsonl")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(DatasetError, match="unknown dataset format"):
        load_rows(tmp_path / "x.txt")
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\nnot json\n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2"):
        load_rows(tmp_path / "bad.jsonl")
    with pytest.raises(DatasetError, match="column 'chosen' missing"):
        DatasetEnv(number_rows()[:4], tokenizer, "dpo")
    with pytest.raises(DatasetError, match="at least 2"):
        DatasetEnv(number_rows()[:1], tokenizer, "sft")
    with pytest.raises(DatasetError, match="call bind"):
        DatasetEnv(number_rows()[:4]).sample(2, np.random.default_rng(0))
    (tmp_path / "x.parquet").write_bytes(b"")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(DatasetError, match="pip install pyarrow"):
            load_rows(tmp_path / "x.parquet")


def test_long_examples_lose_prompt_tokens_first(tokenizer) -> None:
    env = DatasetEnv([{"prompt": "one two three four five six", "response": "1"}] * 2, tokenizer, "sft",
                     max_length=6, test_fraction=0.5)
    (prompt, response), = env.train[0]
    assert len(prompt) + len(response) == 6
    assert response == [*tokenizer.encode("1", add_special_tokens=False), tokenizer.eos_token_id]
