"""The NDJSON event stream of a job's log: `log` lines with the byte offset after each, `status`
events first and at every change, `error` events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from agile_arena.server.store import TERMINAL

READ_BYTES = 256 * 1024
LONGEST_LINE = 64 * 1024
"""A line without a newline this long is sent as it is (progress bars redraw with carriage returns)."""
FOLLOW_POLL_SECONDS = 0.25


def event(kind: str, **fields: Any) -> bytes:
    """One NDJSON line."""
    return (json.dumps({"type": kind, **fields}, ensure_ascii=False) + "\n").encode("utf-8")


def log_size(path: Path) -> int:
    """Bytes in the log so far (0 before the job wrote anything)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


async def stream_log(path: Path, offset: int, follow: bool, status_of: Callable[[], str | None],
                     closing: Callable[[], bool]) -> AsyncIterator[bytes]:
    """Events for the log at `path` from byte `offset`. `status_of` reads the job's status (None if
    it vanished). Without `follow`, ends at the current end of the log; with it, once the job is in
    a terminal status and the log is drained."""
    status = status_of()
    yield event("status", status=status)
    start, pending = offset, b""  # `pending` holds the bytes of an unfinished line starting at `start`
    while True:
        seen = status_of()
        if seen != status and seen is not None:
            status = seen
            yield event("status", status=status)
        finished = status in TERMINAL or not follow
        while True:
            chunk = _read(path, start + len(pending))
            if not chunk:
                break
            pending += chunk
            lines, pending, start = _split(pending, start)
            for line in lines:
                yield line
        if finished:
            if pending and (status in TERMINAL or len(pending) >= LONGEST_LINE):
                yield _line_event(pending, start + len(pending))
            return
        if closing():
            yield event("error", message="the server is shutting down; reconnect with ?offset= to continue")
            return
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


def _read(path: Path, position: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(position)
            return handle.read(READ_BYTES)
    except FileNotFoundError:
        return b""


def _split(pending: bytes, start: int) -> tuple[list[bytes], bytes, int]:
    """Complete lines of `pending` as events, the unfinished rest, and the offset where it starts."""
    events = []
    while True:
        end = pending.find(b"\n")
        if end < 0:
            if len(pending) >= LONGEST_LINE:
                start += len(pending)
                events.append(_line_event(pending, start))
                pending = b""
            return events, pending, start
        start += end + 1
        events.append(_line_event(pending[:end], start))
        pending = pending[end + 1:]


def _line_event(raw: bytes, offset_after: int) -> bytes:
    return event("log", offset=offset_after, line=raw.decode("utf-8", "replace").rstrip("\r\n"))
