"""User-facing manifest errors: one line per problem, `FILE:LINE: dotted.path: message (got VALUE)`."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

Path = tuple[str | int, ...]
_SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "credential")
_NAME_TOKENS = re.compile(r"[^a-z0-9]+")
_COUNT = re.compile(r"(max|min|num|n)_")
_MISSING = object()


def dotted(path: Path) -> str:
    """Render a path as `a.b[0].c`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def is_secret_path(path: Path) -> bool:
    """Whether a value at this path must never be echoed (keys, tokens, passwords)."""
    return any(isinstance(part, str) and is_secret_name(part) for part in path)


def is_secret_name(name: str) -> bool:
    """A key whose value is secret: it contains ``key``, ``token``, ``secret``, ``password``,
    ``passwd`` or ``credential``, or one of its words is a near miss of them (``api_kye``,
    ``wandb_pasword``): a misspelled field still holds the user's secret. Counts and sizes
    (``max_*``, ``min_*``, ``num_*``, ``n_*``) are not secrets."""
    lowered = name.lower()
    if _COUNT.match(lowered):  # sizes such as max_new_tokens are numbers, not secrets
        return False
    if any(word in lowered for word in _SECRET_WORDS):
        return True
    return any(_near(token, word) for token in _NAME_TOKENS.split(lowered) if token for word in _SECRET_WORDS)


def _near(token: str, word: str) -> bool:
    """Within one edit (two for words longer than five letters), a swap of neighbours counting one."""
    allowed = 1 if len(word) <= 5 else 2
    if abs(len(token) - len(word)) > allowed:
        return False
    previous2: list[int] = []
    previous = list(range(len(word) + 1))
    for i, a in enumerate(token, 1):
        current = [i]
        for j, b in enumerate(word, 1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b))
            if i > 1 and j > 1 and a == word[j - 2] and token[i - 2] == b:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        previous2, previous = previous, current
    return previous[-1] <= allowed


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else _compact(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping" if value else "{}"
    if isinstance(value, list):
        return "a list" if value else "[]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


@dataclass(frozen=True)
class ManifestIssue:
    """One problem in a manifest, located by its path (and source line when known)."""

    path: Path
    message: str
    value: Any = field(default=_MISSING, compare=False)
    line: int | None = None
    column: int | None = None
    origin: str | None = None
    """Where the value came from when not from the file, e.g. `--set training.pop_size=-1`."""

    def format(self, filename: str = "<manifest>", severity: str | None = None) -> str:
        """`FILE:LINE: dotted.path: message (got VALUE)`, the value hidden for secrets; `FILE:LINE:COLUMN`
        when the column is known, and the `--set` argument in place of `FILE:LINE` for overrides.
        A `severity` (``"warning"``) follows the location: `FILE:LINE: warning: dotted.path: ...`."""
        if self.origin:
            where = self.origin
        elif self.line:
            where = f"{filename}:{self.line}" + (f":{self.column}" if self.column else "")
        else:
            where = filename
        if severity:
            where = f"{where}: {severity}"
        text = f"{where}: {dotted(self.path)}: {self.message}" if self.path else f"{where}: {self.message}"
        if self.value is not _MISSING:
            shown = "'***'" if is_secret_path(self.path) else _show(self.value)
            text += f" (got {shown})"
        return text

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for `agile validate --json`)."""
        out: dict[str, Any] = {"path": dotted(self.path), "line": self.line, "message": self.message}
        if self.column:
            out["column"] = self.column
        if self.origin:
            out["origin"] = self.origin
        if self.value is not _MISSING:
            out["got"] = "***" if is_secret_path(self.path) else _show(self.value)
        return out


class ManifestWarning(UserWarning):
    """A manifest field agile accepts but does not act on (a field the paradigm does not use, a
    switch that does nothing here), or a value it accepts with a caveat. Validation emits one
    per field, formatted like an error line; `TrainingManifest.warnings` lists them too."""


class RunWarning(UserWarning):
    """Something a run does that its user may not expect (a warm start that takes another
    architecture, a member whose weights stopped being finite); `agile` prints its message alone."""


class ManifestError(ValueError):
    """A manifest that cannot be used; carries every problem found, not just the first."""

    def __init__(self, issues: Sequence[ManifestIssue], filename: str = "<manifest>") -> None:
        self.issues = list(issues)
        self.filename = filename
        super().__init__(self.report())

    def report(self) -> str:
        """All problems, one line each."""
        return "\n".join(issue.format(self.filename) for issue in self.issues)


def _message(error: Any) -> str:
    kind = error["type"]
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field"
    return message[0].lower() + message[1:] if message[:2] != message[:2].upper() else message


def _resolve_path(loc: Sequence[Any], data: Any) -> Path:
    """Map a pydantic location onto the user's data, dropping union tags and validator names."""
    path: list[str | int] = []
    current = data
    for position, part in enumerate(loc):
        last = position == len(loc) - 1
        if (isinstance(current, dict) and part in current) or (isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)):
            path.append(part)
            current = current[part]
        elif last:
            path.append(part)
            current = None
    return tuple(path)


def value_at(data: Any, path: Path) -> Any:
    """The value at `path` in nested data, or the missing marker."""
    current = data
    for part in path:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
        else:
            return _MISSING
    return current


def issues_from_validation_error(
    exc: ValidationError,
    data: Any,
    prefix: Path = (),
    suggest: Callable[[Path, str], str | None] | None = None,
) -> list[ManifestIssue]:
    """Convert a pydantic error into manifest issues with paths relative to the whole manifest."""
    issues = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        if error["type"] == "field_error":
            loc = (*loc, error["ctx"]["field"])
        path = _resolve_path(loc, data)
        if error["type"] == "field_error":
            path = _attach_field(path, error["ctx"]["field"], loc)
        message = error["ctx"]["message"] if error["type"] == "manifest_issue" else _message(error)
        if error["type"] == "extra_forbidden" and suggest is not None:
            hint = suggest(path[:-1], str(path[-1]) if path else "")
            if hint:
                message = f"{message}; {hint}"
        if error["type"] == "manifest_issue":
            issue_value = error.get("input") if error["ctx"].get("has_value") else _MISSING
        elif error["type"] == "field_error":
            issue_value = value_at(data, path)
        elif error["type"] == "missing":
            issue_value = _MISSING
        else:
            issue_value = error.get("input", _MISSING)
        if _is_container(issue_value):
            issue_value = _MISSING
        issues.append(ManifestIssue(prefix + path, message, issue_value))
    return issues


def _attach_field(path: Path, field_name: str, loc: Sequence[Any]) -> Path:
    # field names such as `hidden_size[1]` become two path parts.
    match = re.fullmatch(r"(\w+)\[(\d+)\]", field_name)
    base = path[:-1] if path and path[-1] == field_name else path
    if match:
        return (*base, match.group(1), int(match.group(2)))
    return (*base, field_name)


def _is_container(value: Any) -> bool:
    return isinstance(value, dict | list) and bool(value)
