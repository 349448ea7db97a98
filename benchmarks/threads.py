"""Does `agile train` need OMP_NUM_THREADS=1? Alternated runs of the same manifest in three setups:

- `omp1`: OMP_NUM_THREADS=1 in the environment (what the README types);
- `default`: no thread variable at all (what a user typing `agile train` gets: agile chooses);
- `torch-default`: `--threads <cores>`, torch's own default of one thread per core (agile before
  it chose).

    uv run python benchmarks/threads.py configs/training/maddpg_speaker_listener.yaml \\
        --set training.max_steps=4000 --set training.evo_steps=2000 --repeats 3

Prints one JSON line per run and a summary line with the median wall time of each setup and the
ratios to `omp1`. Runs alternate (omp1, default, torch-default, omp1, ...) so that a machine
getting busier or quieter affects every setup alike.
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

VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "AGILE_NUM_THREADS")


def run_once(manifest: str, overrides: list[str], setup: str, cores: int) -> float:
    """Wall seconds of one `agile train` in `setup`."""
    env = {name: value for name, value in os.environ.items() if name not in VARIABLES}
    extra: list[str] = []
    if setup == "omp1":
        env["OMP_NUM_THREADS"] = "1"
    elif setup == "torch-default":
        extra = ["--threads", str(cores)]
    with tempfile.TemporaryDirectory(prefix="agile-threads-") as run_dir:
        command = [sys.executable, "-m", "agile_cli.main", "train", manifest, "--quiet", "--run-dir", run_dir,
                   *[item for override in overrides for item in ("--set", override)], *extra]
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("manifest")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="override, as agile train --set")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    setups = ("omp1", "default", "torch-default")
    times: dict[str, list[float]] = {setup: [] for setup in setups}
    for repeat in range(args.repeats):
        for setup in setups:
            wall = run_once(args.manifest, args.overrides, setup, cores)
            times[setup].append(wall)
            print(json.dumps({"manifest": args.manifest, "setup": setup, "repeat": repeat, "wall_s": round(wall, 2)}),
                  flush=True)
    medians = {setup: statistics.median(values) for setup, values in times.items()}
    print(json.dumps({"summary": True, "manifest": args.manifest, "cores": cores,
                      "median_wall_s": {k: round(v, 2) for k, v in medians.items()},
                      "ratio_to_omp1": {k: round(v / medians["omp1"], 3) for k, v in medians.items()}}), flush=True)


if __name__ == "__main__":
    main()
