"""`agile arena serve`: the self-hosted training server (the extra `agile-arena[server]`).

`serve(...)` runs the HTTP API of the arena contract on uvicorn; `create_key(...)` adds an API key.
Nothing heavy is imported here: starlette and uvicorn load when `serve` runs.
"""

from __future__ import annotations

from pathlib import Path

from agile_arena.server.limits import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_UPLOAD_BYTES

DEFAULT_PORT = 8470

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "DEFAULT_MAX_UPLOAD_BYTES", "DEFAULT_PORT", "create_key", "serve"]


def serve(data_dir: str | Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT, slots: int = 1,
          max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, *, device: str = "cpu",
          stop_grace: float = 20.0, unsafe_no_sandbox: bool = False, job_memory_gib: float | None = 16.0,
          job_processes: int | None = 512, job_cpu_seconds: int | None = 7 * 24 * 3600,
          job_disk_gib: float | None = 64.0, max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES) -> None:
    """Serve the API on `host:port` (0 picks a free port) until SIGINT/SIGTERM; prints
    `agile arena server listening on http://HOST:PORT` once it accepts requests. At most `slots`
    jobs train at once; `stop_grace` seconds after SIGTERM a stopping worker gets SIGKILL. A
    submission with the files its manifest names may be up to `max_upload_bytes`.

    Every job runs in a bubblewrap sandbox with the `job_*` limits (None lifts one); a host that
    cannot run it makes `serve` raise ValueError, unless `unsafe_no_sandbox` (then nothing isolates
    jobs from the server, and a warning says so at start and in every job's log)."""
    from agile_arena.server.sandbox import GIB, JobLimits, Sandbox, SandboxUnavailable
    from agile_arena.server.serving import run_server

    def gib(value: float | None) -> int | None:
        return None if value is None else int(value * GIB)

    limits = JobLimits(memory_bytes=gib(job_memory_gib), cpu_seconds=job_cpu_seconds, processes=job_processes,
                       file_bytes=gib(job_disk_gib), disk_bytes=gib(job_disk_gib))
    if unsafe_no_sandbox:
        sandbox = Sandbox.disabled()
    else:
        try:
            sandbox = Sandbox.for_server(Path(data_dir), limits=limits, device=device)
        except SandboxUnavailable as exc:
            raise ValueError(f"cannot sandbox jobs on this host: {exc}") from None
    run_server(Path(data_dir), host, port, slots, max_request_bytes, device=device, stop_grace=stop_grace,
               sandbox=sandbox, max_upload_bytes=max_upload_bytes)


def create_key(data_dir: str | Path, name: str) -> str:
    """Create an API key called `name` for the server at `data_dir`; only its SHA-256 is stored.
    Returns the key (shown once: it cannot be recovered)."""
    from agile_arena.server.auth import hash_key, new_key
    from agile_arena.server.store import Store

    name = name.strip()
    if not name or len(name) > 100:
        raise ValueError("a key name must be 1 to 100 characters")
    key = new_key()
    store = Store(Path(data_dir))
    try:
        store.add_key(name, hash_key(key))
    finally:
        store.close()
    return key
