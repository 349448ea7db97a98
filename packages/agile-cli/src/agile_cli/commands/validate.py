"""`agile validate FILE...`: check manifests and report every problem with its line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    """Add the `validate` subcommand."""
    parser = sub.add_parser(
        "validate",
        help="check training manifests",
        description="Validate YAML/JSON training manifests. Exit 0 when all are valid, 2 otherwise.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="manifest files to check")
    parser.add_argument("--json", action="store_true", help="print one JSON verdict per file (one per line)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Validate each file; print verdicts; return 0 if all are valid, else 2."""
    from agile_core.errors import ManifestError
    from agile_core.specs.manifest import TrainingManifest

    failed = False
    for file in args.files:
        try:
            manifest = TrainingManifest.get_validated(file)
        except ManifestError as exc:
            failed = True
            if args.json:
                print(json.dumps({"file": file, "valid": False, "errors": [i.to_dict() for i in exc.issues]}))
            else:
                print(exc.report(), file=sys.stderr)
            continue
        if args.json:
            print(json.dumps({"file": file, "valid": True, "algorithm": manifest.algorithm.name,
                              "paradigm": manifest.paradigm_name}))
        else:
            print(f"{file}: valid ({manifest.algorithm.name}, {manifest.paradigm_name})")
    return 2 if failed else 0
