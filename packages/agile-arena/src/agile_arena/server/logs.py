"""The NDJSON event stream of a job's log: `log` lines with the byte offset after each, `status`
events first and at every change, `error` events."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
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


SHUTTING_DOWN = "the server is shutting down; following continues where it stopped once the server is back"
DELETED = "the experiment was deleted"


def hide_paths(text: str, replacements: tuple[tuple[str, str], ...]) -> str:
    """`text` with each server folder of `replacements` (`(folder, shown as)`, most specific first)
    replaced, so a line never shows where the server keeps its data."""
    for folder, shown in replacements:
        if folder and folder in text:
            pattern = re.escape(folder) + r"(/|(?![\w.-]))"  # the whole folder, not a longer name
            text = re.sub(pattern, functools.partial(_shown, shown), text)
    return text


def _shown(shown: str, match: re.Match[str]) -> str:
    if match.group(1):
        return f"{shown}/" if shown else ""
    return shown or "."


def job_replacements(job_dir: Path, data_dir: Path) -> tuple[tuple[str, str], ...]:
    """Server paths in a job's lines: its own folder (shown relative to it) and the data folder."""
    pairs = []
    for folder, shown in ((job_dir, ""), (data_dir, "<server data>")):
        for text in dict.fromkeys((str(folder), os.path.realpath(folder))):
            pairs.append((text, shown))
    return tuple(pairs)


async def stream_log(path: Path, offset: int, follow: bool, status_of: Callable[[], str | None],
                     closing: Callable[[], bool],
                     hidden: tuple[tuple[str, str], ...] = ()) -> AsyncIterator[bytes]:
    """Events for the log at `path` from byte `offset`. `status_of` reads the job's status (None if
    it vanished). Without `follow`, ends at the current end of the log; with it, once the job is in
    a terminal status and the log is drained. Server folders in lines are hidden (`hide_paths`)."""
    status = status_of()
    if status is None:
        yield event("error", message=DELETED)
        return
    yield event("status", status=status)
    start, pending = offset, b""  # `pending` holds the bytes of an unfinished line starting at `start`
    while True:
        seen = status_of()
        if seen is None:
            yield event("error", message=DELETED)
            return
        if seen != status:
            status = seen
            yield event("status", status=status)
        finished = status in TERMINAL or not follow
        while True:
            chunk = _read(path, start + len(pending))
            if not chunk:
                break
            pending += chunk
            lines, pending, start = _split(pending, start, hidden)
            for line in lines:
                yield line
        if finished:
            if pending and (status in TERMINAL or len(pending) >= LONGEST_LINE):
                yield _line_event(pending, start + len(pending), hidden)
            return
        if closing():
            yield event("error", message=SHUTTING_DOWN)
            return
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


def _read(path: Path, position: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(position)
            return handle.read(READ_BYTES)
    except FileNotFoundError:
        return b""


def _split(pending: bytes, start: int,
           hidden: tuple[tuple[str, str], ...] = ()) -> tuple[list[bytes], bytes, int]:
    """Complete lines of `pending` as events, the unfinished rest, and the offset where it starts."""
    events = []
    while True:
        end = pending.find(b"\n")
        if end < 0:
            if len(pending) >= LONGEST_LINE:
                start += len(pending)
                events.append(_line_event(pending, start, hidden))
                pending = b""
            return events, pending, start
        start += end + 1
        events.append(_line_event(pending[:end], start, hidden))
        pending = pending[end + 1:]


def _line_event(raw: bytes, offset_after: int, hidden: tuple[tuple[str, str], ...] = ()) -> bytes:
    line = raw.decode("utf-8", "replace").rstrip("\r\n")
    return event("log", offset=offset_after, line=hide_paths(line, hidden))
