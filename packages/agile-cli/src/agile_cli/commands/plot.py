"""`agile plot RUN_DIR`: PNG figures of a run (fitness, hyperparameters, lineage)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    """Add the `plot` subcommand."""
    parser = sub.add_parser(
        "plot",
        help="draw a run's fitness, hyperparameters and lineage as PNGs",
        description="Read RUN_DIR/metrics.history.jsonl (written by `agile train`) and write "
                    "fitness.png (every agent's fitness per generation), hyperparameters.png (each "
                    "mutable hyperparameter per agent and generation) and lineage.png (who was "
                    "cloned from whom, with which mutation). Exit 2 when RUN_DIR is not a run directory.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory written by `agile train`")
    parser.add_argument("--out", metavar="DIR", help="where to write the PNGs (default: RUN_DIR/plots)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Write the figures; exit 2 for an unusable run directory."""
    from agile_cli.plotting import RunDirError, plot_run

    try:
        paths = plot_run(args.run_dir, args.out)
    except RunDirError as exc:
        print(f"agile plot: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0
