"""Running the app on uvicorn: a socket bound first (port 0 works), the "listening on" line once
requests are accepted, and log records scrubbed of anything that looks like an API key."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from agile_arena.server.app import create_app
from agile_arena.server.auth import KEY_PATTERN
from agile_arena.server.limits import DEFAULT_MAX_UPLOAD_BYTES
from agile_arena.server.sandbox import Sandbox


class ScrubKeys(logging.Filter):
    """Replace API keys in a record's message and arguments with `arena_***` (defence in depth: no
    request header is ever logged, but a key pasted into a URL would be)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = KEY_PATTERN.sub("arena_***", record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(KEY_PATTERN.sub("arena_***", a) if isinstance(a, str) else a for a in record.args)
        return True


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, announce: str, runner: Any) -> None:
        super().__init__(config)
        self.announce = announce
        self.runner = runner

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # SIGINT/SIGTERM: end the log streams now (uvicorn waits for open connections before the
        # app's shutdown) and start no more jobs
        self.runner.closing = True
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(self.announce, flush=True)


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on host:port (IPv6 when host has a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(False)
    return sock


def run_server(data_dir: Path, host: str, port: int, slots: int, max_request_bytes: int, *,
               device: str = "cpu", stop_grace: float = 20.0, sandbox: Sandbox | None = None,
               max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES) -> None:
    """Serve until SIGINT/SIGTERM (running jobs are checkpointed and marked interrupted). Jobs run in
    `sandbox`; None sets up the default one and raises SandboxUnavailable when the host cannot."""
    if slots < 1:
        raise ValueError("slots must be at least 1")
    if max_request_bytes < 1024:
        raise ValueError("max_request_bytes must be at least 1024")
    if max_upload_bytes < max_request_bytes:
        raise ValueError(f"max_upload_bytes must be at least max_request_bytes ({max_request_bytes})")
    if sandbox is None:
        sandbox = Sandbox.for_server(data_dir, device=device)
    print(f"agile arena: {sandbox.describe()}", file=sys.stderr if not sandbox.enabled else sys.stdout, flush=True)
    app = create_app(data_dir, slots=slots, max_request_bytes=max_request_bytes, device=device,
                     stop_grace=stop_grace, sandbox=sandbox, max_upload_bytes=max_upload_bytes)
    sock = bind(host, port)
    real_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app, log_level="info", lifespan="on", server_header=False, proxy_headers=False,
                            timeout_graceful_shutdown=3)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(ScrubKeys())
    logging.getLogger("uvicorn.error").info("data directory %s, %d slot(s)", data_dir, slots)
    server = _Server(config, f"agile arena server listening on http://{shown}:{real_port}", app.state.runner)
    server.run(sockets=[sock])
    if not server.started:
        sys.exit(1)


