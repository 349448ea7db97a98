"""Running the `agile arena` CLI in-process, for its tests (their fixtures, `fake` and
`isolated_settings`, are in conftest.py)."""

from __future__ import annotations

from agile_cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """`agile arena ARGV...` in-process: (exit code, stdout, stderr)."""
    code = main(["arena", *argv])
    out, err = capsys.readouterr()
    return code, out, err
