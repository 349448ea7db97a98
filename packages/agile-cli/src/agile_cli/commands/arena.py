"""`agile arena ...`: log in to an Arena server, submit manifests, follow and fetch experiments,
and run a server (`serve`, `create-key`).

Needs the `agile-arena` package (imported only when a subcommand runs); `serve` and `create-key`
need its `server` extra. Exit codes: 0 ok, 1 failure (not found, conflict, server or connection
trouble, a followed experiment that did not complete), 2 bad input or usage (invalid manifest,
missing or refused API key), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
RECONNECT_SECONDS = 300.0
ID_ARGUMENT = "experiment id, or its name or the start of its id or name when that names one experiment"
ID_HELP = "ID may also be the experiment's name, or the start (3 characters or more) of its id or name."
Handler = Callable[[argparse.Namespace], int]


class _BadInput(Exception):
    """Bad command-line input: print the message and exit 2."""


class _Missing(Exception):
    """A package this subcommand needs is not installed (exit 2)."""


# ---------------------------------------------------------------------------------- parser
def register(sub: Any) -> None:
    """Add `arena` and its subcommands."""
    parser = sub.add_parser(
        "arena",
        help="train on an Arena server: log in, submit, follow, download",
        description="Submit manifests to an Arena server and follow, stop, resume and download their "
                    "experiments; or run a server yourself (`serve`, `create-key`). Needs agile-arena. "
                    "Exit codes: 0 ok, 1 failure, 2 bad input or a missing/refused API key.",
    )
    actions = parser.add_subparsers(dest="arena_command", metavar="ACTION")
    parser.set_defaults(handler=lambda args: _usage(parser))

    login = _action(actions, "login", _login, "store the server URL and an API key",
                    "Check an API key against the server and store it with the URL in the credentials file "
                    "(mode 0600; $AGILE_ARENA_CONFIG, else ~/.config/agile/arena.json). The key is read from "
                    "standard input (--api-key-stdin) or a hidden prompt, never from the command line.")
    login.add_argument("--api-key-stdin", action="store_true", help="read the key from standard input")
    login.add_argument("--no-verify", action="store_true", help="store the key without checking it with the server")

    _action(actions, "logout", _logout, "forget the stored API key", "Delete the credentials file.", client=False)

    _experiment_actions(actions)
    _action(actions, "resources", _resources, "list where jobs can run",
            "List the server's resources with their slots and running/queued jobs.")

    experiments = actions.add_parser(
        "experiments", help="the experiment actions again: `agile arena experiments submit|list|status|...`",
        description="The experiment actions (submit, list, status, logs, stop, resume, delete, checkpoints, "
                    "metrics, download) as `agile arena experiments ACTION`, the spelling of the reference "
                    "CLI; each is the same as `agile arena ACTION`.")
    experiments.set_defaults(handler=lambda args: _usage(experiments))
    _experiment_actions(experiments.add_subparsers(dest="experiments_command", metavar="ACTION"))

    serve = actions.add_parser("serve", help="run an Arena server (needs agile-arena[server])",
                               description="Run the self-hosted Arena server: jobs run on this machine with the "
                                           "paradigms installed here. Needs agile-arena[server].")
    serve.add_argument("--data-dir", required=True, metavar="DIR", help="where keys, jobs and runs are kept")
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8470, help="port (default 8470; 0 picks a free one)")
    serve.add_argument("--slots", type=int, default=1, help="jobs run at once (default 1); the rest queue")
    serve.add_argument("--max-request-bytes", type=int, default=1_048_576, metavar="N",
                       help="largest request body accepted (default 1 MiB)")
    serve.add_argument("--max-upload-bytes", type=int, default=2 * 1024**3, metavar="N",
                       help="largest submission carrying the files its manifest names (default 2 GiB)")
    serve.add_argument("--device", default="cpu", help="torch device the jobs train on (default cpu)")
    serve.add_argument("--unsafe-no-sandbox", action="store_true",
                       help="run jobs without their bubblewrap sandbox (their code can read and change "
                            "everything the server can); limits: python -m agile_arena.server serve --help")
    serve.set_defaults(handler=_guarded(_serve, json_output=False))

    create_key = actions.add_parser("create-key", help="create an API key on a server's data dir",
                                    description="Create an API key for NAME and print it once (only its hash is "
                                                "stored). Needs agile-arena[server].")
    create_key.add_argument("name", metavar="NAME", help="who the key is for")
    create_key.add_argument("--data-dir", required=True, metavar="DIR", help="the server's data directory")
    create_key.add_argument("--json", action="store_true", help="print {\"name\", \"key\"} as JSON")
    create_key.set_defaults(handler=_guarded(_create_key, json_output=True))


def _experiment_actions(actions: Any) -> None:
    """The actions on experiments, under `agile arena` and under `agile arena experiments`."""
    submit = _action(actions, "submit", _submit, "check a manifest here, then submit it",
                     "Validate MANIFEST locally (fully when its algorithm's paradigm is installed here, else "
                     "the parts core knows) and submit it. Prints the new experiment's id; --follow then "
                     "streams its log until it ends (exit 0 only if it completed).")
    submit.add_argument("manifest", metavar="MANIFEST", help="training manifest (YAML or JSON)")
    submit.add_argument("--resource-id", metavar="ID", help="where to run it (see `agile arena resources`)")
    submit.add_argument("--name", "--experiment-name", dest="name", metavar="NAME", help="experiment name")
    submit.add_argument("--project", metavar="NAME", help="project to file it under")
    submit.add_argument("--num-nodes", type=int, metavar="N",
                        help="nodes to train on (this server trains each job on one: more draws a warning)")
    submit.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a manifest field before it is checked and sent, as `agile train --set` "
                             "does, e.g. --set training.pop_size=2 (repeatable)")
    submit.add_argument("--follow", action="store_true", help="stream the log until the experiment ends")
    _reconnect_option(submit)

    _action(actions, "list", _list, "list your experiments", "List this key's experiments, newest first.")
    for name, handler, text in (("status", _status, "show one experiment"),
                                ("stop", _stop, "stop a queued or running experiment"),
                                ("resume", _resume, "resume a stopped, interrupted or failed experiment "
                                                    "from its last checkpoint (one stopped before it started "
                                                    "starts from the beginning)"),
                                ("delete", _delete, "delete a finished experiment and its files on the server"),
                                ("checkpoints", _checkpoints, "list an experiment's checkpoints and elite")):
        action = _action(actions, name, handler, text, text[0].upper() + text[1:] + ". " + ID_HELP)
        action.add_argument("id", metavar="ID", help=ID_ARGUMENT)

    logs = _action(actions, "logs", _logs, "print an experiment's log",
                   "Print the log (status changes go to standard error). --follow keeps streaming until the "
                   "experiment ends, reconnecting where it left off (through server restarts, for up to "
                   "--reconnect-for seconds without the server); exit 0 only if it completed. " + ID_HELP)
    logs.add_argument("id", metavar="ID", help=ID_ARGUMENT)
    logs.add_argument("--follow", "-f", action="store_true", help="stream until the experiment ends")
    _reconnect_option(logs)
    logs.add_argument("--offset", type=int, default=0, metavar="BYTES", help="start at this byte offset of the log")

    metrics = _action(actions, "metrics", _metrics, "fetch the metrics CSV",
                      "Print the run's metrics CSV, or write it atomically to --output.")
    metrics.add_argument("id", metavar="ID", help=ID_ARGUMENT)
    metrics.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of standard output")
    metrics.add_argument("--force", action="store_true", help="replace an existing FILE")

    download = _action(actions, "download", _download, "download a file or folder of the run",
                       "Download PATH of the run directory (e.g. `elite`, `checkpoints/<name>`, `metrics.csv`) "
                       "into DIR/<last part of PATH>. Archives are checked (no absolute paths, `..` or links) "
                       "and put in place only when complete.")
    download.add_argument("id", metavar="ID", help=ID_ARGUMENT)
    download.add_argument("path", metavar="PATH", help="path relative to the run directory")
    download.add_argument("--output", "-o", default=".", metavar="DIR", help="folder to put it in (default: .)")
    download.add_argument("--force", action="store_true", help="replace an existing DIR/<name>")


def _reconnect_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reconnect-for", type=float, default=RECONNECT_SECONDS, metavar="SECONDS",
                        help=f"while following, keep reconnecting to a server that cannot be reached for this "
                             f"long (default {RECONNECT_SECONDS:.0f})")


def _action(actions: Any, name: str, handler: Handler, help_text: str, description: str,
            client: bool = True) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=description)
    if client:
        parser.add_argument("--url", metavar="URL", help="server URL (default: $AGILE_ARENA_URL, the stored login, "
                                                         "http://127.0.0.1:8470)")
    parser.add_argument("--json", action="store_true", help="machine-readable JSON output")
    parser.set_defaults(handler=_guarded(handler, json_output=True))
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


# ---------------------------------------------------------------------------------- errors
def _guarded(handler: Handler, json_output: bool) -> Handler:
    """Run `handler`, turning every expected failure into a message and an exit code."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except _Missing as exc:
            return _report(args, str(exc), EXIT_USAGE, {"error": "missing_package", "message": str(exc)})
        except _BadInput as exc:
            return _report(args, str(exc), EXIT_USAGE, {"error": "bad_input", "message": str(exc)})
        except KeyboardInterrupt:
            print("\nagile arena: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Exception as exc:
            handled = _arena_failure(args, exc)
            if handled is not None:
                return handled
            if os.environ.get("AGILE_DEBUG"):
                raise
            message = f"unexpected error: {type(exc).__name__}: {exc} (set AGILE_DEBUG=1 for the traceback)"
            return _report(args, message, EXIT_FAILED, {"error": "internal", "message": message})

    return run


def _arena_failure(args: argparse.Namespace, exc: Exception) -> int | None:
    """Message and exit code for the errors of agile_arena and agile_core; None for others."""
    from agile_core.errors import ManifestError

    if isinstance(exc, ManifestError):
        return _report(args, exc.report(), EXIT_USAGE,
                       {"error": "validation", "message": "invalid manifest", "errors": [i.to_dict() for i in exc.issues]},
                       prefix=False)
    if isinstance(exc, FileExistsError):
        return _report(args, f"{exc}; use --force to replace it", EXIT_USAGE, {"error": "exists", "message": str(exc)})
    if isinstance(exc, OSError):
        message = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
        return _report(args, message, EXIT_FAILED, {"error": "os_error", "message": message})
    try:
        from agile_arena import errors
    except ImportError:
        return None
    if isinstance(exc, errors.ArenaValidationError):
        return _report(args, exc.report(), EXIT_USAGE, exc.to_dict(), prefix=not exc.errors)
    if isinstance(exc, errors.ArenaAuthError | errors.ArenaConfigError | errors.ArenaRequestError):
        return _report(args, exc.message, EXIT_USAGE, exc.to_dict())
    if isinstance(exc, errors.ArenaError):
        return _report(args, exc.message, EXIT_FAILED, exc.to_dict())
    return None


def _report(args: argparse.Namespace, message: str, code: int, data: dict[str, Any], prefix: bool = True) -> int:
    print(f"agile arena: {message}" if prefix else message, file=sys.stderr)
    if getattr(args, "json", False):
        _print_json(data)
    return code


def _print_json(data: Any) -> None:
    print(json.dumps(data, allow_nan=False, default=str), flush=True)


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """`data` as JSON with --json, else `text`."""
    if args.json:
        _print_json(data)
    else:
        print(text)


# ---------------------------------------------------------------------------------- helpers
def _arena() -> Any:
    """The agile_arena package, or _Missing with what to install."""
    try:
        import agile_arena
    except ImportError:
        raise _Missing("this command needs the agile-arena package: install agile-arena "
                       "(pip install 'agile-cli[arena]' or pip install agile-arena)") from None
    return agile_arena


def _client(args: argparse.Namespace, api_key: str | None = None) -> Any:
    _arena()
    from agile_arena.client import ArenaClient

    return ArenaClient(api_key=api_key, url=args.url)


def _server_module() -> Any:
    import importlib.util

    def absent(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is None
        except (ImportError, ValueError):  # e.g. a module set to None in sys.modules
            return True

    missing = [name for name in ("agile_arena", "starlette", "uvicorn") if absent(name)]
    if missing:
        raise _Missing(f"this command needs the Arena server: install agile-arena[server] "
                       f"(pip install 'agile-arena[server]'; missing: {', '.join(missing)})")
    import agile_arena.server

    return agile_arena.server


def _one_line(experiment: dict[str, Any]) -> str:
    name = f" {experiment['name']!r}" if experiment.get("name") else ""
    return (f"{experiment.get('id')}{name}: {experiment.get('status')} "
            f"({experiment.get('algorithm')} on {experiment.get('environment')})")


def _follow(client: Any, experiment_id: str, json_output: bool, offset: int = 0) -> int:
    """Stream the log until the experiment ends; exit 0 when it completed, else 1."""
    from agile_arena.events import ErrorEvent, LogEvent, StatusEvent, event_to_dict

    status = None
    try:
        for event in client.logs(experiment_id, follow=True, offset=offset):
            if json_output:
                _print_json(event_to_dict(event))
            elif isinstance(event, LogEvent):
                print(event.line, flush=True)
            elif isinstance(event, StatusEvent):
                print(f"[{experiment_id}: {event.status}]", file=sys.stderr, flush=True)
            elif isinstance(event, ErrorEvent):
                print(f"[{experiment_id}: error: {event.message}]", file=sys.stderr, flush=True)
            if isinstance(event, StatusEvent):
                status = event.status
    except KeyboardInterrupt:
        print(f"\nstopped following; {experiment_id} keeps running (`agile arena stop {experiment_id}` stops it)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    final = client.status(experiment_id)
    if json_output:
        _print_json(final)
    else:
        error = f": {final['error']}" if final.get("error") else ""
        print(f"{_one_line(final)}{error}", file=sys.stderr)
    return EXIT_OK if (final.get("status") or status) == "completed" else EXIT_FAILED


def _set_reconnect_window(client: Any, args: argparse.Namespace) -> None:
    if args.reconnect_for < 0:
        raise _BadInput(f"--reconnect-for must be >= 0, got {args.reconnect_for}")
    client.reconnect_window = args.reconnect_for


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    cells = [[title for _, title in columns]] + [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(value.ljust(width) for value, width in zip(line, widths, strict=True)).rstrip()
                     for line in cells)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


# ---------------------------------------------------------------------------------- commands
def _login(args: argparse.Namespace) -> int:
    import getpass

    _arena()
    from agile_arena.config import KEY_ENV_VARS, resolve_url
    from agile_arena.errors import ArenaConnectionError

    if args.api_key_stdin:
        key = sys.stdin.readline().strip()
    elif sys.stdin.isatty():
        key = getpass.getpass("Arena API key: ").strip()
    else:
        raise _BadInput("no terminal to prompt for the key on; pipe it in with --api-key-stdin")
    if not key:
        raise _BadInput("no API key given")
    url = resolve_url(args.url)
    client = _client(argparse.Namespace(url=url), api_key=key)
    try:
        path = client.login(key, verify=not args.no_verify)  # stores it, as ArenaClient.login does
    except ArenaConnectionError as exc:
        raise ArenaConnectionError(f"{exc.message}; nothing was stored (--no-verify stores it anyway)") from None
    finally:
        client.close()
    shadowing = [name for name in KEY_ENV_VARS if os.environ.get(name)]
    if args.json:
        _print_json({"url": url, "credentials_file": str(path), "verified": not args.no_verify})
    else:
        print(f"logged in to {url} (key stored in {path})")
    if shadowing:
        print(f"note: ${shadowing[0]} is set and takes precedence over the stored key", file=sys.stderr)
    return EXIT_OK


def _logout(args: argparse.Namespace) -> int:
    _arena()
    from agile_arena.config import credentials_path, delete_credentials

    path = credentials_path()
    removed = delete_credentials(path)
    if args.json:
        _print_json({"credentials_file": str(path), "removed": removed})
    else:
        print(f"removed {path}" if removed else f"not logged in ({path} does not exist)")
    return EXIT_OK


def _submit(args: argparse.Namespace) -> int:
    if args.num_nodes is not None and args.num_nodes < 1:
        raise _BadInput(f"--num-nodes must be >= 1, got {args.num_nodes}")
    client = _client(args)
    _set_reconnect_window(client, args)
    from agile_arena.client import one_node_warning
    from agile_arena.manifests import prepare_manifest

    if args.num_nodes is not None and args.num_nodes > 1:
        print(f"agile arena: warning: {one_node_warning(f'--num-nodes {args.num_nodes}')}", file=sys.stderr)
    # ManifestError -> exit 2, nothing sent (a bad --set is named as `--set KEY=VALUE: ...`)
    prepared = prepare_manifest(args.manifest, overrides=args.overrides) if args.overrides else \
        prepare_manifest(args.manifest)
    experiment = client.submit(prepared, resource_id=args.resource_id, experiment_name=args.name,
                               project=args.project)
    if args.json:
        _print_json(experiment)
    else:
        checked = "" if prepared.validated_locally else \
            f" (checked partly here: {prepared.algorithm or 'its algorithm'} is not installed locally)"
        print(f"submitted {_one_line(experiment)}{checked}")
        if not args.follow:
            print(f"follow it with: agile arena logs {experiment['id']} --follow")
    if args.follow:
        return _follow(client, str(experiment["id"]), args.json)
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    experiments = _client(args).list_experiments()
    if args.json:
        _print_json(experiments)
    elif not experiments:
        print("no experiments")
    else:
        rows = [{**experiment, "steps": _steps(experiment.get("progress"), short=True),
                 "fitness": _fitness(experiment.get("progress"))} for experiment in experiments]
        print(_table(rows, [("id", "ID"), ("status", "STATUS"), ("algorithm", "ALGORITHM"),
                            ("environment", "ENVIRONMENT"), ("steps", "STEPS"), ("fitness", "FITNESS"),
                            ("name", "NAME"), ("project", "PROJECT"), ("created_at", "CREATED")]))
    return EXIT_OK


def _steps(progress: Any, short: bool = False) -> str | None:
    """`1024/2048 (50%)` from an Experiment's progress (None when there is none yet)."""
    if not isinstance(progress, dict) or progress.get("steps") is None:
        return None
    steps, total = progress["steps"], progress.get("total_steps")
    if not total:
        return f"{steps}"
    return f"{steps}/{total}" + ("" if short else " steps") + f" ({100 * steps / total:.0f}%)"


def _fitness(progress: Any) -> str | None:
    """The latest generation's best fitness and the best of the run, e.g. `9.50 (best 12.50)`."""
    if not isinstance(progress, dict) or progress.get("fitness") is None:
        return None
    text = f"{progress['fitness']:.2f}"
    best = progress.get("best_fitness")
    return text if best is None or best == progress["fitness"] else f"{text} (best {best:.2f})"


def _progress_lines(progress: Any) -> list[tuple[str, Any]]:
    """`status` lines of an Experiment's progress."""
    if not isinstance(progress, dict):
        return []
    generation = progress.get("generation")
    return [("progress", _steps(progress)), ("generation", generation),
            ("fitness", _fitness(progress)), ("updated_at", progress.get("updated_at"))]


def _resources(args: argparse.Namespace) -> int:
    resources = _client(args).resources()
    if args.json:
        _print_json(resources)
    else:
        print(_table(resources, [("id", "ID"), ("slots", "SLOTS"), ("running", "RUNNING"), ("queued", "QUEUED")]))
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    experiment = _client(args).status(args.id)
    if args.json:
        _print_json(experiment)
        return EXIT_OK
    lines = [(key, experiment.get(key)) for key in ("id", "name", "project", "status", "algorithm", "environment",
                                                    "resource_id", "created_at", "started_at", "finished_at",
                                                    "exit_code", "error")]
    lines[6:6] = _progress_lines(experiment.get("progress"))  # after the environment
    for key, value in lines:
        if value is not None:
            print(f"{key + ':':<13} {value}")
    return EXIT_OK


def _stop(args: argparse.Namespace) -> int:
    experiment = _client(args).stop(args.id)
    _emit(args, experiment, f"stop requested: {_one_line(experiment)}")
    return EXIT_OK


def _resume(args: argparse.Namespace) -> int:
    experiment = _client(args).resume(args.id)
    _emit(args, experiment, f"resumed: {_one_line(experiment)}")
    return EXIT_OK


def _delete(args: argparse.Namespace) -> int:
    client = _client(args)
    experiment = client.status(args.id)  # the experiment ID names, to say which one went
    deleted = client.delete(str(experiment["id"]))
    _emit(args, deleted, f"deleted {_one_line(experiment)}")
    return EXIT_OK


def _checkpoints(args: argparse.Namespace) -> int:
    checkpoints = _client(args).checkpoints(args.id)
    if args.json:
        _print_json(checkpoints)
    elif not checkpoints:
        print("no checkpoints yet")
    else:
        print(_table(checkpoints, [("path", "PATH"), ("kind", "KIND"), ("bytes", "BYTES"), ("modified", "MODIFIED")]))
    return EXIT_OK


def _logs(args: argparse.Namespace) -> int:
    if args.offset < 0:
        raise _BadInput(f"--offset must be >= 0, got {args.offset}")
    client = _client(args)
    if args.follow:
        _set_reconnect_window(client, args)
        experiment_id = str(client.status(args.id)["id"])  # a name or prefix could name another one later
        return _follow(client, experiment_id, args.json, offset=args.offset)
    from agile_arena.events import ErrorEvent, LogEvent, event_to_dict

    for event in client.logs(args.id, follow=False, offset=args.offset):
        if args.json:
            _print_json(event_to_dict(event))
        elif isinstance(event, LogEvent):
            print(event.line)
        elif isinstance(event, ErrorEvent):
            print(f"[error: {event.message}]", file=sys.stderr)
    return EXIT_OK


def _metrics(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.output is None:
        text = client.metrics(args.id)
        if args.json:
            import csv
            import io

            _print_json(list(csv.DictReader(io.StringIO(text))))
        else:
            sys.stdout.write(text)
        return EXIT_OK
    path = client.download_metrics(args.id, args.output, overwrite=args.force)
    _emit(args, {"path": str(path)}, f"metrics written to {path}")
    return EXIT_OK


def _download(args: argparse.Namespace) -> int:
    path = _client(args).download(args.id, args.path, args.output, overwrite=args.force)
    _emit(args, {"path": str(path)}, f"downloaded {args.path} to {path}")
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    for flag, value, low in (("--port", args.port, 0), ("--slots", args.slots, 1),
                             ("--max-request-bytes", args.max_request_bytes, 1024)):
        if value < low:
            raise _BadInput(f"{flag} must be >= {low}, got {value}")
    server = _server_module()
    try:
        server.serve(data_dir=args.data_dir, host=args.host, port=args.port, slots=args.slots,
                     max_request_bytes=args.max_request_bytes, max_upload_bytes=args.max_upload_bytes,
                     device=args.device,
                     unsafe_no_sandbox=args.unsafe_no_sandbox)
    except ValueError as exc:
        raise _BadInput(str(exc)) from None
    return EXIT_OK


def _create_key(args: argparse.Namespace) -> int:
    if not args.name.strip():
        raise _BadInput("NAME must not be empty")
    server = _server_module()
    try:
        key = server.create_key(args.data_dir, args.name)
    except ValueError as exc:
        raise _BadInput(str(exc)) from None
    _emit(args, {"name": args.name, "key": key}, key)
    return EXIT_OK
