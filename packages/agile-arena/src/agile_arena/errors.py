"""Typed errors of the Arena client, one class per kind of failure a caller handles differently.

Messages never contain the API key: the client scrubs every text it puts in an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One problem the server found in a submitted manifest: a dotted field path and a message."""

    path: str
    """Where, as `agile validate` prints it (`algorithm.lr`, `network.head_config.hidden_size[0]`)."""
    message: str
    """What is wrong with it."""
    line: int | None = None
    """Line in the local manifest file, when the client could place the path there."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form."""
        return {"path": self.path, "message": self.message, "line": self.line}


class ArenaError(Exception):
    """Any failure talking to an Arena server."""

    def __init__(self, message: str, *, status: int | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        """HTTP status of the response (None when no response came)."""
        self.kind = kind
        """The server's error kind (`unauthorized`, `not_found`, `validation`...), when it sent one."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for `agile arena ... --json`)."""
        return {"error": self.kind or type(self).__name__, "status": self.status, "message": self.message}


class ArenaAuthError(ArenaError):
    """No API key, or the server refused it (401/403)."""


class ArenaNotFoundError(ArenaError):
    """The experiment, file or checkpoint does not exist, or belongs to another key (404)."""


class ArenaValidationError(ArenaError):
    """The server rejected the manifest (422); `errors` lists the field paths it named."""

    def __init__(self, message: str, errors: list[FieldError] | None = None, *, status: int | None = 422,
                 kind: str | None = "validation", filename: str | None = None) -> None:
        super().__init__(message, status=status, kind=kind)
        self.errors = list(errors or [])
        self.filename = filename

    def report(self) -> str:
        """`FILE:LINE: path: message`, one line per problem, as `agile validate` prints them."""
        if not self.errors:
            return self.message
        where = self.filename or "<manifest>"
        lines = []
        for error in self.errors:
            location = f"{where}:{error.line}" if error.line else where
            lines.append(f"{location}: {error.path}: {error.message}" if error.path else f"{location}: {error.message}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form including the field errors."""
        return {**super().to_dict(), "errors": [error.to_dict() for error in self.errors]}


class ArenaRequestError(ArenaError):
    """The server refused the request itself: bad arguments (400) or a body too large (413)."""


class ArenaConflictError(ArenaError):
    """The request does not fit the experiment's state, e.g. resuming a running job (409)."""


class ArenaServerError(ArenaError):
    """The server failed (5xx), after the retries allowed for the call."""


class ArenaConnectionError(ArenaError):
    """No response: the server could not be reached, the connection dropped or timed out."""


class ArenaConfigError(ArenaError, ValueError):
    """Unusable client settings: a malformed server URL or API key, an unreadable credentials file."""


class UnsafeArchiveError(ArenaError):
    """A downloaded archive with a member that would land outside the target (absolute, `..`,
    links, devices); nothing was extracted."""
