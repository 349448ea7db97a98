"""Multi-seed learning benchmark: does a manifest learn for every seed, not just a chosen one?

Trains one manifest once per seed, each in a fresh subprocess (``--jobs`` at a time), and prints
one JSON line per seed, then one summary line:

    OMP_NUM_THREADS=1 uv run python benchmarks/learning.py configs/training/dqn_cartpole_reference.yaml
    OMP_NUM_THREADS=1 uv run python benchmarks/learning.py M.yaml --seeds 5 --jobs 1 --threshold 475 \\
        --stop-at-threshold --set training.pop_size=1

Seeds: run ``i`` sets ``training.seed`` to ``seed_start + i`` and, when the manifest has a
``mutation`` section, ``mutation.rand_seed`` to the same value (so the mutation and selection
draws vary with the seed too; ``--keep-rand-seed`` leaves it as written). Every other value is the
manifest's, with ``--set`` overrides applied to all seeds.

Per-seed fields: ``best_ever`` is the highest fitness any agent got at any evaluation;
``final_best`` the best fitness at the last evaluation; ``steps_per_agent_to_threshold`` the steps
per agent (``max_steps`` units) at the first evaluation where some agent scored at least the
threshold (null if never); ``curve`` is ``[steps per agent, best fitness of that generation]``
per generation; ``target_reached`` whether the run ended by the loop's own stop rule (every
agent's last fitness at least ``target_score``; with ``--stop-at-threshold``, one agent at the
threshold). The threshold is ``--threshold`` or else the manifest's ``training.target_score``.
``--stop-at-threshold`` ends a seed as soon as one agent reaches the threshold (the training loop
otherwise stops only when *every* agent reaches ``target_score``), which saves time when the
question is steps to threshold; ``final_best`` then means the best at that point. ``--patch``
sets a class attribute in the child before training (an experiment switch, e.g. RainbowDQN's
``max_grad_norm``), so alternatives are measured without editing the library.

Summary: ``success_rate`` (share of seeds whose best agent reached the threshold within the
budget), ``median_steps_to_threshold`` over all seeds (a seed that never reached it counts as
infinitely slow, so the median is null when half or more of the seeds failed), and the spread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

CHILD = """
import csv, json, os, sys, tempfile, time, torch
torch.set_num_threads(1)
from agile_core.overrides import apply_overrides
from agile_core.specs.manifest import validate_source
from agile_core.trainer import LocalTrainer
from agile_core.yaml_source import read_manifest_file
args = json.loads(sys.argv[1])
import importlib, yaml
for patch in args.get("patches", []):  # experiments: "module:Class.attr=value" (value parsed as YAML)
    target, _, raw = patch.partition("=")
    module_name, _, attr_path = target.partition(":")
    owner = importlib.import_module(module_name)
    *parents, attr = attr_path.split(".")
    for name in parents:
        owner = getattr(owner, name)
    setattr(owner, attr, yaml.safe_load(raw))
manifest = validate_source(apply_overrides(read_manifest_file(args["manifest"]), args["overrides"]))
threshold = args["threshold"] if args["threshold"] is not None else manifest.training.target_score
if args["stop_at_threshold"] and threshold is not None:
    import math
    import agile_core.training.generations as generations
    # Stop once ANY agent reaches the threshold (the loop's own rule is every agent).
    generations.target_reached = lambda fitnesses, target: any(
        not math.isnan(f) and f >= threshold for f in fitnesses)
metrics = os.path.join(tempfile.mkdtemp(prefix="agile-learning-"), "metrics.csv")
started = time.perf_counter()
population, fitnesses = LocalTrainer.from_manifest(manifest).train(verbose=False, csv_path=metrics)
wall = time.perf_counter() - started
pop_size = manifest.training.pop_size
rows = list(csv.DictReader(open(metrics)))
# the `step` column is the population's total in the RL loops and per member in the LLM loops;
# perf/global_steps is the population's total in every loop
total_at = {row["step"]: int(float(row["value"])) for row in rows if row["name"] == "perf/global_steps"}
curve = [[total_at.get(row["step"], int(row["step"])) // pop_size, float(row["value"])]
         for row in rows if row["name"] == "hpo/best_fitness"]
target = manifest.training.target_score
print(json.dumps({"curve": curve, "threshold": threshold, "wall_s": round(wall, 2),
                  "target_reached": target is not None and min(fitnesses) >= target,
                  "steps_per_agent": max(agent.steps for agent in population),
                  "algorithm": manifest.algorithm.name, "env": manifest.environment.name,
                  "pop_size": pop_size}))
"""


def seed_overrides(seed: int, has_mutation: bool, keep_rand_seed: bool) -> list[str]:
    """The ``--set`` overrides that make run `seed` differ from the others."""
    overrides = [f"training.seed={seed}"]
    if has_mutation and not keep_rand_seed:
        overrides.append(f"mutation.rand_seed={seed}")
    return overrides


def seed_result(seed: int, curve: Sequence[Sequence[float]], threshold: float | None, wall_s: float) -> dict[str, Any]:
    """Per-seed figures from the best-fitness-per-generation `curve` (``[steps per agent, best]``)."""
    values = [float(best) for _, best in curve if not math.isnan(float(best))]
    reached = None
    if threshold is not None:
        reached = next((int(steps) for steps, best in curve if float(best) >= threshold), None)
    return {
        "seed": seed,
        "best_ever": max(values) if values else None,
        "final_best": float(curve[-1][1]) if curve else None,
        "steps_per_agent_to_threshold": reached,
        "reached": reached is not None,
        "wall_s": wall_s,
        "generations": len(curve),
    }


def summarize(results: Sequence[dict[str, Any]], threshold: float | None) -> dict[str, Any]:
    """Success rate and median steps to threshold over seeds (failures count as never)."""
    ok = [r for r in results if "error" not in r]
    reached = sorted(r["steps_per_agent_to_threshold"] for r in ok if r["reached"])
    runs = len(results)
    # Failures sort after every success; the median is defined only when it lands on a success.
    padded = reached + [math.inf] * (runs - len(reached))
    median = statistics.median(padded) if padded else math.inf
    best = [r["best_ever"] for r in ok if r["best_ever"] is not None]
    return {
        "summary": True,
        "threshold": threshold,
        "seeds": runs,
        "errors": runs - len(ok),
        "successes": len(reached),
        "success_rate": round(len(reached) / runs, 3) if runs else None,
        "median_steps_to_threshold": None if math.isinf(median) else median,
        "steps_to_threshold": reached,
        "best_ever": best,
        "median_best_ever": statistics.median(best) if best else None,
        "wall_s": round(sum(r.get("wall_s", 0.0) for r in ok), 1),
    }


def run_seed(manifest: str, seed: int, overrides: list[str], threshold: float | None, stop: bool,
             keep_rand_seed: bool, has_mutation: bool, patches: Sequence[str] = ()) -> dict[str, Any]:
    """Train `manifest` with `seed` in a subprocess; return its per-seed JSON."""
    args = {"manifest": manifest, "threshold": threshold, "stop_at_threshold": stop,
            "overrides": [*overrides, *seed_overrides(seed, has_mutation, keep_rand_seed)],
            "patches": list(patches)}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"seed": seed, "error": proc.stderr.strip().splitlines()[-3:]}
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    result = seed_result(seed, child["curve"], child["threshold"], child["wall_s"])
    result.update(threshold=child["threshold"], steps_per_agent=child["steps_per_agent"],
                  target_reached=child["target_reached"],
                  curve=[[s, round(v, 1)] for s, v in child["curve"]])
    return result


def manifest_has_mutation(path: str, overrides: list[str]) -> bool:
    """Whether the manifest (after overrides) has a ``mutation`` section."""
    from agile_core.overrides import apply_overrides
    from agile_core.yaml_source import read_manifest_file

    data = apply_overrides(read_manifest_file(path), overrides).data
    return isinstance(data, dict) and data.get("mutation") is not None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("manifest", help="manifest to train")
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (default 5)")
    parser.add_argument("--seed-start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="seeds trained at once (default: min(seeds, CPU cores))")
    parser.add_argument("--threshold", type=float, default=None, help="score to reach (default: target_score)")
    parser.add_argument("--stop-at-threshold", action="store_true",
                        help="end a seed as soon as one agent reaches the threshold")
    parser.add_argument("--keep-rand-seed", action="store_true", help="do not vary mutation.rand_seed with the seed")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="override, as agile train --set")
    parser.add_argument("--patch", dest="patches", action="append", default=[], metavar="MODULE:ATTR=VALUE",
                        help="experiments only: set a class or module attribute in the child before training "
                             "(e.g. agile_offpolicy.rainbow:RainbowDQN.max_grad_norm=null)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    if args.jobs is None:
        args.jobs = max(1, min(args.seeds, os.cpu_count() or 1))
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run every seed, print its JSON line as it finishes (in seed order), then the summary."""
    args = parse_args(argv)
    path = str(Path(args.manifest))
    has_mutation = manifest_has_mutation(path, args.overrides)
    seeds = range(args.seed_start, args.seed_start + args.seeds)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_seed, path, seed, args.overrides, args.threshold, args.stop_at_threshold,
                               args.keep_rand_seed, has_mutation, args.patches) for seed in seeds]
        results = []
        for future in futures:
            result = future.result()
            results.append(result)
            print(json.dumps({"manifest": path, "overrides": args.overrides, "patches": args.patches, **result}),
                  flush=True)
    threshold = next((r["threshold"] for r in results if "threshold" in r), args.threshold)
    print(json.dumps({"manifest": path, "overrides": args.overrides, "patches": args.patches,
                      **summarize(results, threshold)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
