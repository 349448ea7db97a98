"""Preparing hyperparameter dictionaries for logging: secret removal and flattening."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "auth"}
)
_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

Scalar = bool | int | float | str


def is_secret_name(name: object) -> bool:
    """Whether a field name looks like it holds a credential (``api_key``, ``hfToken``, ...)."""
    words = [w.lower() for w in _SPLIT.split(str(name)) if w]
    return any(w in _SECRET_WORDS for w in words) or "apikey" in str(name).lower()


def scrub_secrets(
    params: Mapping[str, Any], *, is_secret_value: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    """Return a copy of ``params`` without secret-looking fields, recursively.

    Fields whose *name* looks like a credential are dropped, and so are string
    values for which ``is_secret_value`` returns true (e.g. ones holding a known API key).
    """
    cleaned: dict[str, Any] = {}
    for name, value in params.items():
        if is_secret_name(name):
            continue
        if isinstance(value, Mapping):
            cleaned[str(name)] = scrub_secrets(value, is_secret_value=is_secret_value)
        elif isinstance(value, str) and is_secret_value is not None and is_secret_value(value):
            continue
        else:
            cleaned[str(name)] = value
    return cleaned


def to_scalar(value: Any) -> Scalar:
    """Convert a value to a bool/int/float/str suitable for a hyperparameter table."""
    if isinstance(value, bool | int | float | str):
        return value
    if value is None:
        return "None"
    item = getattr(value, "item", None)
    if callable(item):
        try:
            result = item()
        except (TypeError, ValueError):
            return str(value)
        if isinstance(result, bool | int | float | str):
            return result
    return str(value)


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, Scalar]:
    """Flatten nested mappings to ``{"a/b": scalar}``; other values become scalars or strings."""
    flat: dict[str, Scalar] = {}
    for name, value in params.items():
        key = f"{prefix}/{name}" if prefix else str(name)
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, key))
        else:
            flat[key] = to_scalar(value)
    return flat
