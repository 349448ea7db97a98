"""`python -m agile_arena.server serve|create-key`: the arena server's command line."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from typing import Any

from agile_arena.server import (
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_UPLOAD_BYTES,
    DEFAULT_PORT,
    create_key,
    serve,
)
from agile_core.cli_types import port, positive_int


def build_parser() -> argparse.ArgumentParser:
    """The `serve` and `create-key` subcommands."""
    parser = argparse.ArgumentParser(prog="python -m agile_arena.server",
                                     description="Self-hosted agile training server (arena).")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="run the HTTP API and the job workers")
    run.add_argument("--data-dir", required=True, help="store, job folders and run directories")
    run.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    run.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT}; 0 = any free port)")
    run.add_argument("--slots", type=positive_int, default=1, help="jobs that train at once (default: 1)")
    run.add_argument("--max-request-bytes", type=positive_int, default=DEFAULT_MAX_REQUEST_BYTES,
                     help=f"largest request body (default: {DEFAULT_MAX_REQUEST_BYTES})")
    run.add_argument("--max-upload-bytes", type=positive_int, default=DEFAULT_MAX_UPLOAD_BYTES,
                     help=f"largest submission carrying the files its manifest names (default: {DEFAULT_MAX_UPLOAD_BYTES})")
    run.add_argument("--device", default="cpu", help="torch device of the workers (default: cpu)")
    run.add_argument("--stop-grace", type=float, default=20.0,
                     help="seconds a stopping worker gets to checkpoint before SIGKILL (default: 20)")
    add_sandbox_options(run)
    key = sub.add_parser("create-key", help="create an API key (printed once; only its hash is stored)")
    key.add_argument("--data-dir", required=True)
    key.add_argument("name", help="who the key is for")
    return parser


def add_sandbox_options(parser: argparse.ArgumentParser) -> None:
    """The job sandbox's options (docs/arena.md, "The job sandbox"); 0 lifts a limit."""
    group = parser.add_argument_group("job sandbox (bubblewrap; 0 lifts a limit)")
    group.add_argument("--unsafe-no-sandbox", action="store_true",
                       help="run jobs without a sandbox: their code can read and change everything the server can")
    group.add_argument("--job-memory-gib", type=float, default=16.0, metavar="GIB",
                       help="address space of each job process (default: 16)")
    group.add_argument("--job-processes", type=int, default=512, metavar="N",
                       help="processes and threads of a job (default: 512)")
    group.add_argument("--job-cpu-seconds", type=int, default=7 * 24 * 3600, metavar="S",
                       help="CPU seconds of each job process (default: 604800, a week)")
    group.add_argument("--job-disk-gib", type=float, default=64.0, metavar="GIB",
                       help="size of a job's folder, and of any one file it writes (default: 64)")


def sandbox_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`serve()`'s sandbox arguments from the parsed options (0 becomes None: no limit)."""
    for flag, value in (("--job-memory-gib", args.job_memory_gib), ("--job-processes", args.job_processes),
                        ("--job-cpu-seconds", args.job_cpu_seconds), ("--job-disk-gib", args.job_disk_gib)):
        if value < 0:
            raise ValueError(f"{flag} must be >= 0 (0 lifts the limit), got {value}")
    return {"unsafe_no_sandbox": args.unsafe_no_sandbox, "job_memory_gib": args.job_memory_gib or None,
            "job_processes": args.job_processes or None, "job_cpu_seconds": args.job_cpu_seconds or None,
            "job_disk_gib": args.job_disk_gib or None}


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand; 0 on success, 2 on bad input."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "create-key":
            print(create_key(args.data_dir, args.name))
            return 0
        serve(args.data_dir, args.host, args.port, args.slots, args.max_request_bytes, device=args.device,
              stop_grace=args.stop_grace, max_upload_bytes=args.max_upload_bytes, **sandbox_kwargs(args))
    except ValueError as exc:
        print(f"agile arena: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"agile arena: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""), file=sys.stderr)
        return 2
    except sqlite3.Error as exc:
        print(f"agile arena: cannot use the store in {args.data_dir}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
