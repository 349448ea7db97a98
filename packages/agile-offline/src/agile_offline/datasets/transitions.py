"""`TransitionData`, one flat table of transitions, and its validation from raw arrays."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from agile_offline.datasets.errors import DatasetError

__all__ = ["Observations", "TransitionData", "from_arrays"]

Observations = np.ndarray | dict[str, np.ndarray]

_ROW_NOTE = "every field needs one row per transition"


@dataclass
class TransitionData:
    """``N`` transitions as numpy arrays, row ``i`` being one environment step.

    Episodes are contiguous runs of rows; an episode ends at a row whose `terminations` or
    `truncations` is set. `terminations` marks true terminal states (no bootstrapping);
    `truncations` marks episodes cut short (time limits), whose `next_observations` are still
    real observations to bootstrap from.
    """

    observations: Observations
    """``[N, ...]``, or one ``[N, ...]`` array per key for dict observations."""
    actions: np.ndarray
    """``[N, ...]`` actions as the environment takes them."""
    rewards: np.ndarray
    """``[N]`` float32."""
    next_observations: Observations
    """``[N, ...]``: the observation after each action (same layout as `observations`)."""
    terminations: np.ndarray
    """``[N]`` bool: the step reached a terminal state."""
    truncations: np.ndarray
    """``[N]`` bool: the episode was cut short after this step."""

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def dones(self) -> np.ndarray:
        """``[N]`` bool: the step ended its episode (terminated or truncated)."""
        return np.logical_or(self.terminations, self.truncations)

    def episode_bounds(self) -> list[tuple[int, int]]:
        """``(start, stop)`` row ranges of the complete episodes (a trailing unfinished one is left out)."""
        ends = np.flatnonzero(self.dones) + 1
        starts = np.concatenate([[0], ends[:-1]]).astype(int)
        return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]

    def episode_returns(self) -> list[float]:
        """Undiscounted return of every complete episode, in order."""
        ends = np.flatnonzero(self.dones)
        if ends.size == 0:
            return []
        totals = np.cumsum(self.rewards, dtype=np.float64)[ends]
        return np.diff(totals, prepend=0.0).tolist()

    def episode_lengths(self) -> list[int]:
        """Steps of every complete episode, in order."""
        return [stop - start for start, stop in self.episode_bounds()]

    def summary(self) -> dict[str, Any]:
        """Counts and return statistics, for printing."""
        returns = self.episode_returns()
        stats: dict[str, Any] = {
            "transitions": len(self),
            "episodes": len(returns),
            "terminations": int(np.count_nonzero(self.terminations)),
            "truncations": int(np.count_nonzero(self.truncations)),
        }
        if returns:
            stats.update(mean_return=float(np.mean(returns)), min_return=float(np.min(returns)),
                         max_return=float(np.max(returns)))
        return stats


def _rows(array: np.ndarray) -> int:
    return int(array.shape[0]) if array.ndim else -1


def _as_array(source: str, field: str, value: Any) -> np.ndarray:
    try:
        array = np.asarray(value)
    except Exception as exc:  # ragged lists, objects numpy cannot stack
        raise DatasetError(f"{source}: `{field}` cannot be read as an array ({type(exc).__name__}: {exc})") from exc
    if array.dtype.kind not in "biuf":
        raise DatasetError(f"{source}: `{field}` holds {array.dtype} values; numbers or booleans are needed")
    if array.ndim == 0:
        raise DatasetError(f"{source}: `{field}` is a scalar; it needs one row per transition")
    return array


def _observations(source: str, field: str, value: Any) -> Observations:
    if isinstance(value, Mapping):
        if not value:
            raise DatasetError(f"{source}: `{field}` is an empty group; dict observations need one array per key")
        return {str(key): _as_array(source, f"{field}/{key}", item) for key, item in value.items()}
    return _as_array(source, field, value)


def _flags(source: str, field: str, value: Any, rows: int) -> np.ndarray:
    array = _as_array(source, field, value)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise DatasetError(f"{source}: `{field}` has shape {array.shape}; it needs one flag per transition, "
                           f"shape ({rows},)")
    if array.dtype != np.bool_:
        bad = ~np.isin(array, (0, 1))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DatasetError(f"{source}: `{field}` holds {array[row].item()!r} at row {row}; flags must be 0/1 or booleans")
        array = array.astype(bool)
    return array


def _leaves(name: str, value: Observations) -> list[tuple[str, np.ndarray]]:
    if isinstance(value, dict):
        return [(f"{name}/{key}", item) for key, item in value.items()]
    return [(name, value)]


def _check_rows(source: str, fields: list[tuple[str, np.ndarray]]) -> int:
    """The common row count of `fields`; the first field sets it."""
    first_name, first = fields[0]
    rows = _rows(first)
    for name, array in fields[1:]:
        if _rows(array) != rows:
            raise DatasetError(
                f"{source}: `{name}` has {_rows(array)} rows (shape {array.shape}) but `{first_name}` has "
                f"{rows} (shape {first.shape}); {_ROW_NOTE}")
    return rows


def _check_pair(source: str, obs: Observations, next_obs: Observations) -> None:
    if isinstance(obs, dict) != isinstance(next_obs, dict):
        kinds = ["a group of arrays" if isinstance(v, dict) else "one array" for v in (obs, next_obs)]
        raise DatasetError(f"{source}: `observations` is {kinds[0]} but `next_observations` is {kinds[1]}")
    if isinstance(obs, dict) and isinstance(next_obs, dict):
        if set(obs) != set(next_obs):
            raise DatasetError(f"{source}: `observations` has keys {sorted(obs)} but `next_observations` has "
                               f"{sorted(next_obs)}")
        pairs = [(f"/{key}", obs[key], next_obs[key]) for key in obs]
    else:
        assert isinstance(obs, np.ndarray) and isinstance(next_obs, np.ndarray)
        pairs = [("", obs, next_obs)]
    for suffix, a, b in pairs:
        if a.shape[1:] != b.shape[1:]:
            raise DatasetError(f"{source}: `next_observations{suffix}` rows have shape {b.shape[1:]} but "
                               f"`observations{suffix}` rows have shape {a.shape[1:]}")


def _check_finite(source: str, field: str, array: np.ndarray) -> None:
    """DatasetError naming the field and the first bad row when a float field holds NaN or inf."""
    if array.dtype.kind != "f":
        return
    bad = ~np.isfinite(array.reshape(array.shape[0], -1)).all(axis=1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        count = int(bad.sum())
        first = np.asarray(array[row]).ravel()[:4].tolist()
        raise DatasetError(f"{source}: `{field}` has {count} row{'s' if count != 1 else ''} with non-finite values "
                           f"(first at row {row}: {first})")


def from_arrays(source: str, *, observations: Any, actions: Any, rewards: Any, next_observations: Any,
                terminations: Any, truncations: Any) -> TransitionData:
    """A validated `TransitionData` from array-likes (dict observations as mappings of arrays).

    Raises `DatasetError` (naming `source`) for non-numeric fields, mismatched row counts, an
    empty table, non-finite numbers (NaN or inf in any float field), flags that are not 0/1, or observation/next-observation
    layouts that differ.
    """
    obs = _observations(source, "observations", observations)
    next_obs = _observations(source, "next_observations", next_observations)
    acts = _as_array(source, "actions", actions)
    rew = _as_array(source, "rewards", rewards)
    if rew.ndim == 2 and rew.shape[1] == 1:
        rew = rew[:, 0]
    fields = [*_leaves("observations", obs), ("actions", acts), ("rewards", rew),
              *_leaves("next_observations", next_obs)]
    rows = _check_rows(source, fields)
    if rew.ndim != 1:
        raise DatasetError(f"{source}: `rewards` has shape {rew.shape}; it needs one reward per transition, "
                           f"shape ({rows},)")
    term = _flags(source, "terminations", terminations, rows)
    trunc = _flags(source, "truncations", truncations, rows)
    _check_rows(source, [("observations", fields[0][1]), ("terminations", term), ("truncations", trunc)])
    if rows == 0:
        raise DatasetError(f"{source}: the dataset is empty (0 transitions)")
    _check_pair(source, obs, next_obs)
    for name, array in fields:
        _check_finite(source, name, array)
    return TransitionData(observations=obs, actions=acts, rewards=rew.astype(np.float32, copy=False),
                          next_observations=next_obs, terminations=term, truncations=trunc)
