"""Contextual-bandit benchmark: NeuralUCB and NeuralTS on the Iris table, several seeds.

Trains each manifest once per seed, each run in a fresh subprocess (``--jobs`` at a time), and
prints one JSON line per run, then one summary line per manifest:

    OMP_NUM_THREADS=1 uv run python benchmarks/bandits.py --seeds 5
    OMP_NUM_THREADS=1 uv run python benchmarks/bandits.py configs/training/neural_ts_iris.yaml --seeds 3 --jobs 2

Run ``i`` sets ``training.seed`` and ``mutation.rand_seed`` to ``seed_start + i``; everything else
is the manifest's (the whole evolutionary loop: selection and mutations on).

Per-run fields: ``steps_per_s`` (bandit steps of the whole population per second of training),
``seconds_to_target`` / ``steps_to_target`` (wall time and steps per agent until some agent's
greedy fitness first reached ``--target``; null if never), ``last_regrets`` (each member's regret
over its last ``evo_steps`` training steps), ``random_regret`` (a uniformly random policy's
regret over the same number of steps, mean of 40 windows), ``success`` (every member's last
regret at most half the random one: the learning test's bar) and ``peak_rss_mb`` (the child's
peak resident memory, Linux ``ru_maxrss``). Summary: ``success_rate`` and medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = [ROOT / "configs" / "training" / "neural_ucb_iris.yaml", ROOT / "configs" / "training" / "neural_ts_iris.yaml"]

CHILD = """
import csv, json, resource, sys, tempfile, time
from pathlib import Path
import numpy as np, torch
torch.set_num_threads(1)
from agile_core.specs.manifest import TrainingManifest
from agile_core.trainer import LocalTrainer
from agile_offline.bandits.run import make_env
args = json.loads(sys.argv[1])
manifest = TrainingManifest.get_validated(args["manifest"])
data = manifest.model_dump(mode="json", exclude_none=True)
data["training"]["seed"] = args["seed"]
if args.get("max_steps"):
    data["training"]["max_steps"] = args["max_steps"]
if data.get("mutation") is not None:
    data["mutation"]["rand_seed"] = args["seed"]
seeded = TrainingManifest.model_validate(data)
seeded._base_dir = manifest.base_dir
window = seeded.evo_steps
with tempfile.TemporaryDirectory() as folder:
    csv_path = f"{folder}/metrics.csv"
    start_wall = time.time()
    start = time.monotonic()
    population, _ = LocalTrainer.from_manifest(seeded).train(verbose=False, csv_path=csv_path)
    seconds = time.monotonic() - start
    rows = list(csv.DictReader(open(csv_path)))
best = [(float(r["step"]), float(r["value"]), float(r["wall_time"])) for r in rows if r["name"] == "hpo/best_fitness"]
hit = next((b for b in best if b[1] >= args["target"]), None)
pop_size = len(population)
env = make_env(seeded.environment, base_dir=seeded.base_dir, seed=args["seed"])
rng = np.random.default_rng([args["seed"], 1])  # a stream apart from the env's
random = sum(float(env.step(int(rng.integers(env.num_arms)))[2]) for _ in range(window * 40)) / 40
regrets = [agent.phase_regret for agent in population]
steps = sum(agent.steps for agent in population)
print(json.dumps({
    "manifest": Path(args["manifest"]).name, "seed": args["seed"], "pop_size": pop_size,
    "steps_per_agent": seeded.training.max_steps, "train_seconds": round(seconds, 1),
    "steps_per_s": round(steps / seconds, 1),
    "seconds_to_target": None if hit is None else round(hit[2] - start_wall, 1),
    "steps_to_target": None if hit is None else int(hit[0] / pop_size),
    "last_regrets": regrets, "random_regret": round(random, 1),
    "success": max(regrets) <= 0.5 * random,
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
}))
"""


def run_one(manifest: Path, seed: int, target: float, max_steps: int | None = None) -> dict[str, Any]:
    """Train `manifest` with `seed` in a subprocess; return its JSON line."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    job = {"manifest": str(manifest), "seed": seed, "target": target, "max_steps": max_steps}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        return {"manifest": manifest.name, "seed": seed, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Success rate and medians of one manifest's runs."""
    ok = [r for r in results if "error" not in r]
    to_target = [r["seconds_to_target"] for r in ok if r["seconds_to_target"] is not None]
    return {
        "manifest": results[0]["manifest"], "seeds": [r["seed"] for r in results],
        "success_rate": sum(bool(r.get("success")) for r in results) / len(results),
        "median_steps_per_s": statistics.median(r["steps_per_s"] for r in ok) if ok else None,
        "median_seconds_to_target": statistics.median(to_target) if to_target else None,
        "worst_last_regret": max((max(r["last_regrets"]) for r in ok), default=None),
        "random_regret": statistics.median(r["random_regret"] for r in ok) if ok else None,
        "max_peak_rss_mb": max((r["peak_rss_mb"] for r in ok), default=None),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("manifests", nargs="*", type=Path, help="manifests (default: the two Iris examples)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seed-start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--target", type=float, default=0.95, help="greedy fitness (mean reward) to time")
    parser.add_argument("--max-steps", type=int, default=None, help="override training.max_steps (smoke runs)")
    args = parser.parse_args(argv)
    manifests = args.manifests or MANIFESTS
    jobs = [(m, args.seed_start + i) for m in manifests for i in range(args.seeds)]
    def one(job: tuple[Path, int]) -> dict[str, Any]:
        result = run_one(job[0], job[1], args.target, args.max_steps)
        print(json.dumps(result), flush=True)  # as each run ends
        return result

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, jobs))
    for manifest in manifests:
        print(json.dumps({"summary": summarise([r for r in results if r["manifest"] == manifest.name])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
