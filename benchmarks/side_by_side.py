"""agile against the reference trainer on the same manifests: whole-process wall time, steps/s and
peak memory, runs interleaved so a drifting machine load hits both alike.

    OMP_NUM_THREADS=1 uv run python benchmarks/side_by_side.py M1.yaml M2.yaml \\
        --reference-python /path/to/reference-venv/bin/python --repeats 2 \\
        --set training.max_steps=20000 --set training.evo_steps=5000 --out table.md

Each manifest (with the `--set` overrides applied and the `--unset` keys removed, written once to a temporary file both sides
read) trains in a fresh process: ``python -m agile_cli.main train M --quiet`` here and, when
``--reference-python`` names an interpreter with the reference installed, ``python -m
agilerl.train M --device cpu`` there. Within a repeat the order alternates (agile first, then the
reference first, ...). This script never installs anything.

Columns (medians over the repeats): wall seconds of each side and their ratio (agile / reference,
lower is better); steps/s as the budget's environment steps (``pop_size x max_steps``) over the
wall time, the same definition for both; peak RSS of each process, and the same above that
interpreter's own ``import torch`` (what each framework adds over its torch build); agile's steps
per agent to ``--threshold`` (its best member's first evaluation at or above it, from the run's
``metrics.history.jsonl``; blank when never).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from agile_core.overrides import apply_overrides
from agile_core.yaml_source import read_manifest_file

IMPORT_TORCH = "import torch, resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"


def measured(command: list[str], cwd: Path) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in KB, exit code) of `command` run to its end."""
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    assert process.stderr is not None
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = stderr.decode(errors="replace").strip().splitlines()[-3:]
        print(f"  failed ({process.returncode}): {' | '.join(tail)}", file=sys.stderr)
    return time.monotonic() - started, int(usage.ru_maxrss), process.returncode


def torch_baseline(python: str) -> int:
    """Peak RSS (KB) of `python -c "import torch"`."""
    return int(subprocess.run([python, "-c", IMPORT_TORCH], capture_output=True, text=True, check=True).stdout)


def steps_to_threshold(run_dir: Path, threshold: float | None) -> int | None:
    """Steps per agent at agile's first generation whose best fitness reached `threshold`."""
    history = run_dir / "metrics.history.jsonl"
    if threshold is None or not history.is_file():
        return None
    for line in history.read_text().splitlines():
        record = json.loads(line)
        scores = [a["fitness"] for a in record["agents"] if isinstance(a.get("fitness"), int | float)]
        if scores and max(scores) >= threshold:
            steps = [a.get("steps", 0) for a in record["agents"]]
            return int(max(steps))
    return None


def _absolute_files(environment: Any, folders: list[Path]) -> None:
    """Data files the environment names (bandit tables, offline datasets), made absolute: the
    manifest is rewritten into a scratch folder and the reference runs in another."""
    if not isinstance(environment, dict):
        return
    for key in ("path", "features", "targets", "dataset"):
        value = environment.get(key)
        if isinstance(value, str) and not Path(value).is_absolute():
            found = next((folder / value for folder in folders if (folder / value).is_file()), None)
            if found is not None:
                environment[key] = str(found.resolve())


def benchmark(manifest: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every repeat of one manifest on both sides; medians."""
    data = apply_overrides(read_manifest_file(manifest), args.set).data
    for key in args.unset:  # fields one side does not know (e.g. agile's training.seed)
        *parents, leaf = key.split(".")
        section = data
        for part in parents:
            section = section.get(part, {})
        section.pop(leaf, None)
    _absolute_files(data.get("environment"), [manifest.resolve().parent, Path.cwd()])
    budget = int(data["training"]["pop_size"]) * int(data["training"]["max_steps"])
    written = work / manifest.name
    written.write_text(yaml.safe_dump(data, sort_keys=False))
    sides: dict[str, list[tuple[float, int, int]]] = {"agile": [], "reference": []}
    reached: list[int | None] = []
    for repeat in range(args.repeats):
        order = ["agile", "reference"] if repeat % 2 == 0 else ["reference", "agile"]
        for side in order:
            if side == "reference" and args.reference_python is None:
                continue
            run_dir = work / f"{manifest.stem}-{side}-{repeat}"
            if side == "agile":
                command = [sys.executable, "-m", "agile_cli.main", "train", str(written), "--quiet",
                           "--run-dir", str(run_dir)]
            else:
                run_dir.mkdir()
                command = [args.reference_python, "-m", "agilerl.train", str(written), "--device", "cpu"]
            result = measured(command, run_dir if side == "reference" else work)
            print(f"{manifest.name} repeat {repeat} {side}: {result[0]:.1f} s, {result[1] / 1024:.0f} MB",
                  file=sys.stderr)
            sides[side].append(result)
            if side == "agile":
                reached.append(steps_to_threshold(run_dir, args.threshold))
    row: dict[str, Any] = {"manifest": manifest.name, "pop": data["training"]["pop_size"],
                           "steps_per_agent": data["training"]["max_steps"]}
    for side, results in sides.items():
        good = [r for r in results if r[2] == 0]
        if good:
            row[f"{side}_wall_s"] = statistics.median(r[0] for r in good)
            row[f"{side}_rss_mb"] = statistics.median(r[1] for r in good) / 1024
            row[f"{side}_steps_per_s"] = budget / row[f"{side}_wall_s"]
    if "reference_wall_s" in row and "agile_wall_s" in row:
        row["ratio"] = row["agile_wall_s"] / row["reference_wall_s"]
    found = [r for r in reached if r is not None]
    row["agile_steps_to_threshold"] = int(statistics.median(found)) if found else None
    return row


def table(rows: list[dict[str, Any]], baselines: dict[str, int]) -> str:
    """The markdown table of `rows` (RSS above each interpreter's `import torch` too)."""
    def cell(value: Any, form: str) -> str:
        return "" if value is None else format(value, form)

    lines = ["| manifest | pop | steps per agent | agile s | reference s | ratio | agile steps/s | reference "
             "steps/s | agile MB (above torch) | reference MB (above torch) | agile steps to threshold |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        above = {side: (row.get(f"{side}_rss_mb") or 0) - baselines.get(side, 0) / 1024 for side in baselines}
        rss = {side: f"{row[f'{side}_rss_mb']:.0f} ({above[side]:.0f})" if f"{side}_rss_mb" in row else ""
               for side in ("agile", "reference")}
        lines.append(f"| {row['manifest']} | {row['pop']} | {row['steps_per_agent']:,} | "
                     f"{cell(row.get('agile_wall_s'), '.1f')} | {cell(row.get('reference_wall_s'), '.1f')} | "
                     f"{cell(row.get('ratio'), '.3f')} | {cell(row.get('agile_steps_per_s'), ',.0f')} | "
                     f"{cell(row.get('reference_steps_per_s'), ',.0f')} | {rss['agile']} | {rss['reference']} | "
                     f"{cell(row.get('agile_steps_to_threshold'), ',')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifests", nargs="+", type=Path, help="manifests to train on both sides")
    parser.add_argument("--reference-python", default=None, metavar="PYTHON",
                        help="interpreter of an environment where the reference trainer is installed")
    parser.add_argument("--repeats", type=int, default=2, help="alternated runs per side (default 2)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override applied to every manifest, both sides (repeatable)")
    parser.add_argument("--unset", action="append", default=[], metavar="KEY",
                        help="dotted key removed from every manifest, both sides (repeatable)")
    parser.add_argument("--threshold", type=float, default=None, help="fitness whose first reach agile reports")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = parser.parse_args()
    baselines = {"agile": torch_baseline(sys.executable)}
    if args.reference_python:
        baselines["reference"] = torch_baseline(args.reference_python)
    with tempfile.TemporaryDirectory(prefix="side-by-side-") as folder:
        rows = [benchmark(manifest.resolve(), args, Path(folder)) for manifest in args.manifests]
    for row in rows:
        print(json.dumps(row))
    text = table(rows, baselines)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
