"""Strict JSON helpers: exact round trips, no NaN, no duplicate keys, durable writes."""

from __future__ import annotations

import json
import os
from typing import Any


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def strict_loads(text: str) -> Any:
    """Parse JSON, refusing duplicate object keys and NaN/Infinity literals."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def strict_dumps(value: Any, *, expand_depth: int = 3) -> str:
    """Serialise standard JSON (``ValueError`` for NaN/inf, ``TypeError`` for other types).

    Objects nested less than ``expand_depth`` deep get one member per line; deeper values
    are written compactly, which keeps large skeletons small but the manifest readable.
    """
    return _dumps(value, 0, expand_depth) + "\n"


def _dumps(value: Any, depth: int, expand_depth: int) -> str:
    if not isinstance(value, dict) or not value or depth >= expand_depth:
        return json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    pad = " " * (depth + 1)
    members = []
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"JSON object keys must be str, got {key!r}")
        members.append(
            f"{pad}{json.dumps(key, ensure_ascii=False)}: {_dumps(item, depth + 1, expand_depth)}"
        )
    return "{\n" + ",\n".join(members) + "\n" + " " * depth + "}"


def require_exact_json(value: Any, what: str) -> Any:
    """Return ``value`` after checking it survives a JSON round trip unchanged.

    Rejects tuples (would become lists), non-str keys (would become str), NaN, and objects
    JSON cannot represent, so what is loaded is exactly what was saved.
    """
    try:
        text = strict_dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} is not JSON-serialisable: {exc}") from exc
    if not _same(strict_loads(text), value):
        raise TypeError(
            f"{what} does not survive a JSON round trip exactly "
            "(use str keys, lists instead of tuples, and plain int/float/bool/str/None)"
        )
    return value


def _same(loaded: Any, original: Any) -> bool:
    if isinstance(original, dict):
        return (
            isinstance(loaded, dict)
            and list(loaded) == list(original)
            and all(_same(loaded[k], original[k]) for k in original)
        )
    if isinstance(original, list):
        return (
            isinstance(loaded, list)
            and len(loaded) == len(original)
            and all(map(_same, loaded, original))
        )
    if isinstance(original, float):
        return type(loaded) is float and loaded == original
    return type(loaded) is type(original) and bool(loaded == original)


def write_json_durably(path: str, value: Any) -> None:
    """Write ``value`` as UTF-8 JSON to a new file at ``path`` and fsync it."""
    data = strict_dumps(value).encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
