"""`ArenaTrainer.train(completion=...)`: the reward function tried on one completion before a job is
sent, so a reward module that fails or returns no number is found here, not hours later on the
server.

The function is called as the training loop calls it, `reward_fn(completion, answer, prompt)`,
with the answer and the prompt of the dataset's first row (JSON lines or CSV; other formats and
multi-turn environments give empty strings). The module is the user's own code and runs here.
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import importlib.util
import json
import math
from pathlib import Path
from typing import Any


class RewardCheckError(ValueError):
    """The reward module cannot be loaded, or its function fails or returns no finite number."""


def check_reward(environment: dict[str, Any], base_dir: Path, completion: str) -> dict[str, Any]:
    """Call the manifest's reward function on `completion`; return what was tried and the reward."""
    if not isinstance(completion, str):
        raise RewardCheckError(f"completion must be a string, got {type(completion).__name__}")
    reference = environment.get("reward_file_path")
    name = environment.get("reward_fn_name") or "reward_fn"
    if not isinstance(reference, str):
        raise RewardCheckError("environment.reward_file_path: a completion is checked with the reward module, "
                               "and this manifest names none")
    function = getattr(_module(reference, base_dir), name, None)
    if not callable(function):
        raise RewardCheckError(f"environment.reward_fn_name: {reference} has no function {name!r}")
    prompt, answer = _first_row(environment, base_dir)
    try:
        reward = function(completion, answer, prompt)
    except Exception as exc:
        raise RewardCheckError(f"environment.reward_fn_name: {name}(completion, answer, prompt) raised "
                               f"{type(exc).__name__}: {exc}") from None
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        raise RewardCheckError(f"environment.reward_fn_name: {name} returned {reward!r}; a reward is a finite number")
    return {"completion": completion, "prompt": prompt, "answer": answer, "reward": float(reward)}


def _module(reference: str, base_dir: Path) -> Any:
    try:
        if reference.endswith(".py"):
            path = Path(reference).expanduser()
            path = path if path.is_absolute() else base_dir / path
            spec = importlib.util.spec_from_file_location("_agile_arena_reward_check", path)
            if spec is None or spec.loader is None or not path.is_file():
                raise FileNotFoundError(f"no such file {path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(reference)
    except Exception as exc:
        raise RewardCheckError(f"environment.reward_file_path: cannot load {reference} "
                               f"({type(exc).__name__}: {exc})") from None


def _first_row(environment: dict[str, Any], base_dir: Path) -> tuple[str, str]:
    """(prompt, answer) of the dataset's first row, formatted as the loop formats prompts."""
    dataset = environment.get("dataset")
    first = dataset[0] if isinstance(dataset, list) and dataset else dataset
    if not isinstance(first, str):
        return "", ""
    path = Path(first).expanduser()
    path = path if path.is_absolute() else base_dir / path
    row = _read_first(path)
    if row is None:
        return "", ""
    prompt = str(row.get(environment.get("prompt_column") or "prompt", ""))
    answer = str(row.get(environment.get("answer_column") or "answer", ""))
    template = environment.get("prompt_template")
    if isinstance(template, str):
        with contextlib.suppress(KeyError, IndexError, ValueError):
            prompt = template.format(**{**{str(k): v for k, v in row.items()}, "prompt": prompt})
    return prompt, answer


def _read_first(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            if path.suffix.lower() in (".jsonl", ".json"):
                for line in handle:
                    if line.strip():
                        row = json.loads(line)
                        return row if isinstance(row, dict) else None
            elif path.suffix.lower() == ".csv":
                return next(iter(csv.DictReader(handle)), None)
    except (OSError, ValueError):
        return None
    return None
