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
        description="Validate YAML/JSON training manifests. Every file is checked, even after one fails. "
                    "Exit 0 when all are valid, 2 otherwise.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="manifest files to check")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field in every file before checking, as `agile train --set` does (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON verdict per file (one per line)")
    parser.set_defaults(handler=run)


def _check(file: str, overrides: list[str]) -> Any:
    """The validated manifest; a ManifestError for any problem the file (or an override) has."""
    from agile_core.errors import ManifestError, ManifestIssue
    from agile_core.overrides import apply_overrides
    from agile_core.specs.manifest import validate_source
    from agile_core.yaml_source import read_manifest_file

    try:
        return validate_source(apply_overrides(read_manifest_file(file), overrides), emit_warnings=False)
    except ManifestError:
        raise
    except Exception as exc:
        detail = " ".join(str(exc).split())[:200]
        message = f"internal error while validating ({type(exc).__name__}: {detail}); please report it"
        raise ManifestError([ManifestIssue((), message)], file) from None


def _print_json(verdict: dict[str, Any]) -> None:
    print(json.dumps(verdict, allow_nan=False, default=str))


def run(args: argparse.Namespace) -> int:
    """Validate each file; print verdicts; return 0 if all are valid, else 2."""
    from agile_core.errors import ManifestError

    failed = False
    for file in args.files:
        try:
            manifest = _check(file, args.overrides)
        except ManifestError as exc:
            failed = True
            if args.json:
                _print_json({"file": file, "valid": False, "errors": [i.to_dict() for i in exc.issues]})
            else:
                print(exc.report(), file=sys.stderr)
            continue
        notes = manifest.warnings
        if args.json:
            _print_json({"file": file, "valid": True, "algorithm": manifest.algorithm.name,
                         "paradigm": manifest.paradigm_name, "warnings": [i.to_dict() for i in notes]})
        else:
            for note in notes:
                print(note.format(file, severity="warning"), file=sys.stderr)
            counted = f", {len(notes)} warning{'s' if len(notes) != 1 else ''}" if notes else ""
            print(f"{file}: valid ({manifest.algorithm.name}, {manifest.paradigm_name}){counted}")
    return 2 if failed else 0
