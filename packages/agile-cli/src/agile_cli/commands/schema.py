"""`agile schema`: print the manifest's JSON Schema for editor completion and checking."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add the `schema` subcommand."""
    parser = sub.add_parser(
        "schema",
        help="print the manifest JSON Schema",
        description="Print the JSON Schema of training manifests (for YAML language servers and editors).",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print or write the schema."""
    from agile_core.schema import manifest_json_schema

    text = json.dumps(manifest_json_schema(), indent=2)
    if args.output:
        try:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            print(f"agile schema: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    else:
        print(text)
    return 0
