"""The `agile` command. Subcommands import their heavy dependencies only when they run."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from agile_cli.commands import arena, dataset, evaluate, plot, schema, train, validate

COMMANDS = (train, evaluate, plot, validate, schema, dataset, arena)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `agile` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="agile",
        description="Manifest-driven reinforcement learning with evolutionary hyperparameter optimisation.",
    )
    parser.add_argument("--version", action="store_true", help="print the installed agile packages and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def _version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    lines = []
    for dist in ("agile-core", "agile-cli", "agile-offpolicy", "agile-onpolicy", "agile-marl",
                 "agile-offline", "agile-llm", "agile-arena"):
        try:
            lines.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            continue
    return "\n".join(lines)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """agile's own warnings as one `agile: warning: ...` line; others as Python prints them."""
    from agile_core.errors import RunWarning

    if issubclass(category, RunWarning):
        print(f"agile: warning: {message}", file=file or sys.stderr)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


def main(argv: Sequence[str] | None = None) -> int:
    """Run `agile` with `argv`; return the exit code (0 ok, 1 failure, 2 bad input or usage)."""
    warnings.showwarning = _show_warning
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if args.version:
        print(_version_text())
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.handler(args))


_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG})
"""Write failures of standard output (`agile schema > /dev/full`) reported in one line."""


def run(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: exit with `main`'s code; output that cannot be written (a closed
    pipe such as `| head`, a full disk) ends the command without a traceback."""
    try:
        code = main(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`agile ... | head`): stop quietly, as a killed process
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        code = 128 + signal.SIGPIPE
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"agile: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        code = 1
    sys.exit(code)


def run_arena() -> None:
    """Console-script entry point of `arena`: the same as `agile arena ...`."""
    run(["arena", *sys.argv[1:]])


if __name__ == "__main__":
    run()
