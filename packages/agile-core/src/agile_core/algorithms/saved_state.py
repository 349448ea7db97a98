"""Checks on a saved agent before it is trusted: its JSON fields have the types and ranges the
agent could have written, and each network's weights fit the architecture saved beside them.

A damaged or hand-edited checkpoint is refused here with a `CheckpointError` naming the field,
instead of failing deep inside a constructor or ``load_state_dict``.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

from agile_core.checkpoint import CheckpointError

__all__ = ["check_agent_fields", "check_weights_fit", "decode_scores", "encode_scores", "rebuilding"]

_MAX_COUNT = 2**62
_OBJECT_FIELDS = ("init_args", "network_configs", "hyperparameters", "hp_config", "lineage", "generators", "extra")
_COUNT_FIELDS = ("index", "steps", "learn_counter")
_SCORE_FIELDS = ("fitness", "scores")
LOAD_FAULTS = (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError, OverflowError)
"""What a constructor or ``load_state_dict`` raises on a saved value it cannot take."""


def encode_scores(values: list[float]) -> list[float | None]:
    """Fitness or score history as strict JSON: a non-finite value (NaN rewards) becomes null."""
    return [float(v) if math.isfinite(v) else None for v in map(float, values)]


def decode_scores(values: list[float | None]) -> list[float]:
    """The inverse of `encode_scores` (null reads back as NaN)."""
    return [math.nan if v is None else float(v) for v in values]


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_agent_fields(meta: Mapping[str, Any]) -> None:
    """CheckpointError (naming the field) unless the agent metadata has the saved layout."""
    for field in _OBJECT_FIELDS:
        if not isinstance(meta.get(field), dict):
            raise CheckpointError(None, f"{field} must be a JSON object, got {_brief(meta.get(field))}")
    for field in _COUNT_FIELDS:
        value = meta.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _MAX_COUNT:
            raise CheckpointError(None, f"{field} must be an integer in [0, 2**62), got {_brief(value)}")
    for field in _SCORE_FIELDS:
        values = meta.get(field)
        if not isinstance(values, list) or not all(
                v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values):
            raise CheckpointError(None, f"{field} must be a list of numbers, got {_brief(values)}")
    if not isinstance(meta.get("mut"), str):
        raise CheckpointError(None, f"mut must be a string, got {_brief(meta.get('mut'))}")


def check_weights_fit(network: Any, state: Mapping[str, Any], name: str) -> None:
    """CheckpointError when the saved `state` of network `name` does not fit `network` (built from
    the architecture saved with it): missing or extra entries, or a tensor of another shape."""
    expected = network.state_dict()
    if not isinstance(state, Mapping):
        raise CheckpointError(None, f"network {name!r}: its weights are not a state dict")
    problems = [f"{key} is missing" for key in expected if key not in state]
    problems += [f"{key} is not part of the architecture" for key in state if key not in expected]
    for key, tensor in expected.items():
        saved = state.get(key)
        if saved is not None and hasattr(tensor, "shape") and tuple(getattr(saved, "shape", ())) != tuple(tensor.shape):
            problems.append(f"{key} has shape {list(saved.shape)}, its architecture {list(tensor.shape)}")
    if problems:
        more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
        raise CheckpointError(None, f"network {name!r}: the saved weights do not fit the saved architecture: "
                                    + "; ".join(problems[:2]) + more)


@contextlib.contextmanager
def rebuilding(path: str | os.PathLike[str] | None, what: str) -> Iterator[None]:
    """Turn any fault while rebuilding a saved agent into one CheckpointError for `path`, prefixed
    with `what` (e.g. ``agents[2]``)."""
    try:
        yield
    except CheckpointError as exc:
        raise CheckpointError(exc.path or path, f"{what}: {exc.problem}") from exc
    except KeyError as exc:
        raise CheckpointError(path, f"{what}: the saved state has no entry {exc.args[0]!r}") from exc
    except LOAD_FAULTS as exc:
        problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(path, f"{what}: {problem}") from exc
