"""`DatasetEnv`: teacher-forced SFT and DPO batches from local files or in-memory rows.

Rows come from JSONL, CSV or Parquet files (Parquet needs ``pyarrow``), a list of dicts, or a
``datasets.Dataset``. They are split once into train and test parts (deterministic for a given
``split_seed``), tokenised once, and served as padded tensors:

* SFT (``kind="sft"``): ``input_ids``, ``attention_mask`` and ``labels`` ``[B, L]``, where labels
  are -100 everywhere except on response tokens (the loss never trains on the prompt);
* DPO (``kind="dpo"``): the same three keys for the chosen responses ``[0:B]`` followed by the
  rejected ones ``[B:2B]`` (one forward for both).

Prompt and response are tokenised separately and concatenated (BOS before the prompt and EOS
after the response when the tokenizer has them), so the response mask is exact in token ids.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

__all__ = ["DatasetEnv", "DatasetError", "load_rows"]

IGNORE_INDEX = -100
"""Label of positions that take no loss (prompt and padding)."""


class DatasetError(ValueError):
    """A dataset that cannot be used: missing file or column, unknown format, too few rows."""


def load_rows(source: str | Path | Sequence[str | Path] | Iterable[Mapping[str, Any]] | Any,
              base_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Rows (dicts) from file path(s) (``.jsonl``/``.json`` lines, ``.csv``, ``.parquet``), a list
    of dicts or a ``datasets.Dataset``."""
    if isinstance(source, str | Path):
        return _read_file(_resolve(source, base_dir))
    if isinstance(source, Sequence) and source and all(isinstance(s, str | Path) for s in source):
        return [row for item in source for row in _read_file(_resolve(item, base_dir))]
    items: Any = source
    rows = [dict(row) for row in items]
    if not all(isinstance(row, dict) for row in rows):
        raise DatasetError("in-memory datasets are sequences of dicts (or a datasets.Dataset)")
    return rows


def _resolve(path: str | Path, base_dir: str | Path | None) -> Path:
    candidate = Path(path).expanduser()
    if not candidate.is_absolute() and base_dir is not None:
        candidate = Path(base_dir) / candidate
    if not candidate.is_file():
        raise DatasetError(f"dataset file not found: {candidate}")
    return candidate


def _read_file(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        rows = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise DatasetError(f"{path}:{number}: not a JSON line ({error.msg})") from None
        return rows
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            return [dict(row) for row in csv.DictReader(handle)]
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DatasetError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
        return [dict(row) for row in pq.read_table(path).to_pylist()]
    raise DatasetError(f"{path}: unknown dataset format {suffix!r} (use .jsonl, .csv or .parquet)")


class DatasetEnv:
    """A tokenised, split preference or supervised dataset serving teacher-forced batches.

    Args:
        source: File path(s), list of dicts or ``datasets.Dataset`` (see :func:`load_rows`).
        tokenizer: A Hugging Face tokenizer; None defers tokenising to :meth:`bind`.
        kind: ``"sft"`` (prompt, response) or ``"dpo"`` (prompt, chosen, rejected); with the
            tokenizer, or later in :meth:`bind`.
        prompt_column, response_column, chosen_column, rejected_column: Column names.
        prompt_template: Format string with ``{prompt}`` (other columns by name), or None.
        test_fraction: Share of rows held out (at least one row on each side).
        split_seed: Seed of the split permutation.
        max_length: Longest tokenised example; longer ones lose prompt tokens from the left,
            then response tokens from the right.
        base_dir: Folder relative file paths are resolved against.
        name: Label for logs.
    """

    def __init__(self, source: Any, tokenizer: Any = None, kind: Literal["sft", "dpo"] | None = None, *,
                 prompt_column: str = "prompt", response_column: str = "response", chosen_column: str = "chosen",
                 rejected_column: str = "rejected", prompt_template: str | None = None,
                 test_fraction: float = 0.1, split_seed: int = 0, max_length: int = 512,
                 base_dir: str | Path | None = None, name: str = "dataset") -> None:
        if not 0.0 < test_fraction < 1.0:
            raise DatasetError(f"test_fraction must be in (0, 1), got {test_fraction}")
        self.name = name
        self.num_envs = 1
        self.kind: str | None = None
        self.tokenizer: Any = None
        self.max_length = int(max_length)
        self.prompt_template = prompt_template
        self.column_names = {"prompt": prompt_column, "response": response_column, "chosen": chosen_column,
                             "rejected": rejected_column}
        rows = load_rows(source, base_dir)
        if len(rows) < 2:
            raise DatasetError(f"the dataset has {len(rows)} row(s); a train/test split needs at least 2")
        order = np.random.default_rng(split_seed).permutation(len(rows))
        n_test = min(len(rows) - 1, max(1, round(test_fraction * len(rows))))
        self.test_rows = [rows[i] for i in sorted(order[:n_test])]
        self.train_rows = [rows[i] for i in sorted(order[n_test:])]
        self.train: list[Any] = []
        self.test: list[Any] = []
        if tokenizer is not None or kind is not None:
            if tokenizer is None or kind is None:
                raise DatasetError("give both tokenizer and kind, or neither (then call bind() later)")
            self.bind(tokenizer, kind)

    def bind(self, tokenizer: Any, kind: str, max_length: int | None = None) -> DatasetEnv:
        """Check the columns `kind` (``"sft"`` or ``"dpo"``) needs and tokenise both splits with
        `tokenizer` (what a manifest run does once the model is loaded); returns self."""
        if kind not in ("sft", "dpo"):
            raise DatasetError(f"kind must be 'sft' or 'dpo', not {kind!r}")
        names = self.column_names
        responses = [names["response"]] if kind == "sft" else [names["chosen"], names["rejected"]]
        for column in (names["prompt"], *responses):
            for row in self.train_rows + self.test_rows:
                if column not in row:
                    raise DatasetError(f"column {column!r} missing in a row (columns there: {sorted(row)}); "
                                       f"a {kind.upper()} dataset needs {[names['prompt'], *responses]}")
        if max_length is not None:
            self.max_length = int(max_length)
        self.kind, self.tokenizer = kind, tokenizer
        self._columns = (names["prompt"], *responses)
        self.train = [self._encode(row) for row in self.train_rows]
        self.test = [self._encode(row) for row in self.test_rows]
        return self

    def _check_bound(self) -> None:
        if self.tokenizer is None:
            raise DatasetError("the dataset is not tokenised yet: call bind(tokenizer, kind) first")

    # ------------------------------------------------------------------ tokenisation
    def prompt_text(self, row: Mapping[str, Any]) -> str:
        """The prompt of `row` after the template."""
        prompt = str(row[self._columns[0]])
        if self.prompt_template is None:
            return prompt
        return self.prompt_template.format(**{**{k: v for k, v in row.items()}, "prompt": prompt})

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a prompt (BOS first when the tokenizer has one)."""
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        bos = self.tokenizer.bos_token_id
        return ([bos] if bos is not None else []) + ids

    def _encode(self, row: Mapping[str, Any]) -> tuple[tuple[list[int], list[int]], ...]:
        prompt = self.encode_prompt(self.prompt_text(row))
        eos = self.tokenizer.eos_token_id
        pairs = []
        for column in self._columns[1:]:
            response = list(self.tokenizer.encode(str(row[column]), add_special_tokens=False))
            response += [eos] if eos is not None else []
            response = response[: self.max_length - 1]
            pairs.append((prompt[-(self.max_length - len(response)):], response))
        return tuple(pairs)

    # ------------------------------------------------------------------ batches
    def __len__(self) -> int:
        return len(self.train)

    def steps_per_epoch(self, batch_size: int) -> int:
        """Learning steps that see about every training example once."""
        return max(1, -(-len(self.train) // int(batch_size)))

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, Any]:
        """A training batch of `batch_size` distinct examples (all of them if fewer) drawn with `rng`;
        data-parallel, this process's part of a draw of `batch_size` per process."""
        from agile_core.distributed.data_parallel import data_share

        self._check_bound()
        processes, rank = data_share()
        count = max(1, min(int(batch_size), len(self.train) // processes))
        indices = rng.choice(len(self.train), size=count * processes, replace=False)[rank * count:(rank + 1) * count]
        return self.collate([self.train[int(i)] for i in indices])

    def test_batches(self, batch_size: int) -> Iterable[dict[str, Any]]:
        """The test split in order, in batches."""
        self._check_bound()
        for start in range(0, len(self.test), batch_size):
            yield self.collate(self.test[start:start + batch_size])

    def collate(self, examples: Sequence[tuple[tuple[list[int], list[int]], ...]]) -> dict[str, Any]:
        """Right-padded ``input_ids``/``attention_mask``/``labels`` (torch tensors); for DPO the
        chosen sequences come first, then the rejected ones."""
        import torch

        sequences = [example[k] for k in range(len(self._columns) - 1) for example in examples]
        length = max(len(p) + len(r) for p, r in sequences)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(sequences), length), int(pad), dtype=torch.long)
        mask = torch.zeros((len(sequences), length), dtype=torch.long)
        labels = torch.full((len(sequences), length), IGNORE_INDEX, dtype=torch.long)
        for row, (prompt, response) in enumerate(sequences):
            full = prompt + response
            ids[row, :len(full)] = torch.tensor(full)
            mask[row, :len(full)] = 1
            labels[row, len(prompt):len(full)] = torch.tensor(response)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels, "pairs": len(examples)}

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset (batches are drawn with each agent's own generator); kept for loops."""
