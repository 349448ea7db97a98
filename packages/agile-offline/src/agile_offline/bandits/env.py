"""`BanditEnv`: a contextual bandit made from a labelled table.

Each step shows one random row of the table; the agent picks one of ``K`` arms (the distinct
target values) and is paid 1 when it picked the row's target, else 0. The context of arm ``k``
is the row's standardised features placed in the ``k``-th of ``K`` blocks of a ``K * d`` vector
(the *disjoint* encoding), so one step's observation is ``[K, K * d]``: one context per arm,
and an agent scores every arm's context with one network.

API (not a Gymnasium env: a bandit step has no episode and answers with a regret)::

    env = BanditEnv(features, targets, seed=0)
    contexts, info = env.reset(seed=0)        # [K, K*d] float32, {"row": i}
    contexts, reward, regret, info = env.step(arm)
    # arm: an int (reward, regret floats) or an int array, e.g. one arm per population member
    # answering the same row (reward, regret float32 arrays of its shape); info["target"]: the
    # arm that paid, info["row"]: the next row.
"""

from __future__ import annotations

import csv
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["BanditDataError", "BanditEnv", "load_table", "read_features", "read_targets"]


class BanditDataError(ValueError):
    """A bandit table that cannot be used; the message names the file, row and column."""


class BanditEnv:
    """A contextual bandit over a table of `features` ``[N, d]`` and `targets` ``[N]``.

    Args:
        features: Numeric feature rows ``[N, d]``; standardised per column (zero mean, unit
            variance; a constant column stays 0).
        targets: One label per row (any hashable values); the distinct labels are the arms,
            in sorted order when they sort, else in order of first appearance.
        seed: Seeds the row sampler (``reset(seed=...)`` reseeds it).
        name: Name shown in logs.
    """

    num_envs = 1
    """Bandit envs are not vectorised."""

    def __init__(self, features: Any, targets: Sequence[Hashable] | np.ndarray, seed: int | None = None,
                 name: str = "bandit") -> None:
        table = np.asarray(features, dtype=np.float64)
        if table.ndim != 2 or table.shape[0] == 0 or table.shape[1] == 0:
            raise BanditDataError(f"features must be a non-empty [rows, columns] table, got shape {table.shape}")
        labels = list(targets)
        if len(labels) != table.shape[0]:
            raise BanditDataError(f"features have {table.shape[0]} rows but targets have {len(labels)}")
        if not np.isfinite(table).all():
            row, column = map(int, np.argwhere(~np.isfinite(table))[0])
            raise BanditDataError(f"features row {row + 1}, column {column + 1} is not finite")
        self.name = name
        self.arms: list[Hashable] = _arm_order(labels)
        if len(self.arms) < 2:
            raise BanditDataError(f"a bandit needs at least 2 distinct targets (arms), got {self.arms}")
        arm_of = {label: index for index, label in enumerate(self.arms)}
        self.targets = np.array([arm_of[label] for label in labels], dtype=np.int64)
        std = table.std(axis=0)
        self.features = ((table - table.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)
        self.num_arms = len(self.arms)
        self.num_features = table.shape[1]
        dim = self.num_arms * self.num_features
        self.single_observation_space = spaces.Box(-np.inf, np.inf, shape=(dim,), dtype=np.float32)
        self.single_action_space = spaces.Discrete(self.num_arms)
        self.rng = np.random.default_rng(seed)
        self.row = int(self.rng.integers(len(self.targets)))

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def contexts(self, row: int | None = None) -> np.ndarray:
        """The ``[K, K * d]`` contexts of `row` (default: the current row)."""
        x = self.features[self.row if row is None else row]
        d = self.num_features
        out = np.zeros((self.num_arms, self.num_arms * d), dtype=np.float32)
        for arm in range(self.num_arms):
            out[arm, arm * d:(arm + 1) * d] = x
        return out

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Draw a new row (reseeding the sampler first when `seed` is given)."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.row = int(self.rng.integers(len(self.targets)))
        return self.contexts(), {"row": self.row}

    def step(self, arm: Any) -> tuple[np.ndarray, Any, Any, dict[str, Any]]:
        """Answer the current row with `arm` (an int, or an int array of answers to the same row);
        return ``(next contexts, reward, regret, info)``. Reward is 1 for the row's target,
        else 0; regret is ``1 - reward`` (the best arm always pays 1)."""
        arms = np.asarray(arm)
        if not np.issubdtype(arms.dtype, np.integer) or (arms < 0).any() or (arms >= self.num_arms).any():
            raise ValueError(f"arm must be an integer in [0, {self.num_arms}), got {arm!r}")
        target = int(self.targets[self.row])
        reward = (arms == target).astype(np.float32)
        regret = 1.0 - reward
        self.row = int(self.rng.integers(len(self.targets)))
        info = {"target": target, "row": self.row}
        if reward.ndim == 0:
            return self.contexts(), float(reward), float(regret), info
        return self.contexts(), reward, regret, info

    def close(self) -> None:
        """Nothing to release."""

    @classmethod
    def from_csv(cls, features: str | Path, targets: str | Path, seed: int | None = None,
                 name: str = "bandit") -> BanditEnv:
        """A bandit from a features CSV and a targets CSV (see :func:`load_table`)."""
        table, labels = load_table(features, targets)
        return cls(table, labels, seed=seed, name=name)


def _arm_order(labels: list[Hashable]) -> list[Hashable]:
    distinct = list(dict.fromkeys(labels))
    try:
        return sorted(distinct)  # type: ignore[type-var]
    except TypeError:
        return distinct


def _rows(path: Path) -> list[list[str]]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = [[cell.strip() for cell in row] for row in csv.reader(handle)]
    except FileNotFoundError:
        raise BanditDataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise BanditDataError(f"{path}: cannot read it as CSV ({error})") from None
    return [row for row in rows if any(row)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_features(path: str | Path) -> np.ndarray:
    """Numeric rows ``[N, d]`` of a CSV file; a first row that is not all numbers is a header."""
    path = Path(path)
    rows = _rows(path)
    header = bool(rows) and not all(_is_number(cell) for cell in rows[0])
    names = rows[0] if header else []
    body = rows[1:] if header else rows
    if not body:
        raise BanditDataError(f"{path}: no data rows")
    width = len(body[0])
    values = np.empty((len(body), width), dtype=np.float64)
    first_line = 2 if header else 1
    for number, row in enumerate(body):
        line = first_line + number
        if len(row) != width:
            raise BanditDataError(f"{path}: row {line} has {len(row)} columns, expected {width}")
        for column, cell in enumerate(row):
            try:
                values[number, column] = float(cell)
            except ValueError:
                label = f"column {column + 1}" + (f" ({names[column]!r})" if column < len(names) else "")
                raise BanditDataError(f"{path}: row {line}, {label}: {cell!r} is not a number") from None
    return values


def read_targets(path: str | Path) -> list[Hashable]:
    """The labels of a one-column CSV file (numbers when every label is one); a first row
    that is the only non-numeric cell of an otherwise numeric column, or a name like
    ``target``/``label``/``class``, is taken as a header."""
    path = Path(path)
    rows = _rows(path)
    if any(len(row) != 1 for row in rows):
        line = next(i for i, row in enumerate(rows, start=1) if len(row) != 1)
        raise BanditDataError(f"{path}: row {line} has {len(rows[line - 1])} columns; targets need exactly one")
    cells = [row[0] for row in rows]
    if not cells:
        raise BanditDataError(f"{path}: no data rows")
    numeric_rest = len(cells) > 1 and all(_is_number(cell) for cell in cells[1:])
    if (numeric_rest and not _is_number(cells[0])) or cells[0].lower() in _HEADER_NAMES:
        cells = cells[1:]
    if not cells:
        raise BanditDataError(f"{path}: no data rows")
    if all(_is_number(cell) for cell in cells):
        numbers = [float(cell) for cell in cells]
        return [int(v) if v.is_integer() else v for v in numbers]
    return list(cells)


_HEADER_NAMES = {"target", "targets", "label", "labels", "class", "classes", "y", "species", "arm", "category"}


def load_table(features: str | Path, targets: str | Path) -> tuple[np.ndarray, list[Hashable]]:
    """Features ``[N, d]`` and labels ``[N]`` from two CSV files with the same number of rows."""
    table = read_features(features)
    labels = read_targets(targets)
    if len(labels) != table.shape[0]:
        raise BanditDataError(f"{features} has {table.shape[0]} data rows but {targets} has {len(labels)}; "
                              "they must match row for row")
    return table, labels
