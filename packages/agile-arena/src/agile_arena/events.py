"""Events of an experiment's log stream (`GET /v1/experiments/{id}/logs`, one JSON object a line)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

TERMINAL_STATUSES = frozenset({"completed", "failed", "stopped", "interrupted"})
"""Statuses after which a job no longer runs (until it is resumed)."""


@dataclass(frozen=True)
class LogEvent:
    """One line of the job's log; `offset` is the byte offset after it (resume from there)."""

    line: str
    offset: int
    type: str = "log"


@dataclass(frozen=True)
class StatusEvent:
    """The job's status, sent first and whenever it changes."""

    status: str
    type: str = "status"

    @property
    def terminal(self) -> bool:
        """Whether the job has stopped running."""
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True)
class ErrorEvent:
    """A problem the server reports in the stream (the stream may go on)."""

    message: str
    type: str = "error"


Event = LogEvent | StatusEvent | ErrorEvent


class MalformedEventError(ValueError):
    """A stream line that is not one of the documented events."""


def parse_event(line: str) -> Event:
    """The event one NDJSON line encodes."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise MalformedEventError(f"not a JSON object: {exc.msg}") from None
    if not isinstance(data, dict):
        raise MalformedEventError("not a JSON object")
    kind = data.get("type")
    try:
        if kind == "log":
            return LogEvent(line=str(data["line"]), offset=int(data["offset"]))
        if kind == "status":
            return StatusEvent(status=str(data["status"]))
        if kind == "error":
            return ErrorEvent(message=str(data["message"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedEventError(f"{kind} event without a valid {exc}") from None
    raise MalformedEventError(f"unknown event type {kind!r}")


def event_to_dict(event: Event) -> dict[str, Any]:
    """The event as the server sends it (for `--json` output)."""
    return asdict(event)
