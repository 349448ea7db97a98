"""Offline benchmark: CQN on CartPole from mixed-quality data, over several seeds.

Each seed records its own data (a DQN trained only until its greedy return first reaches 200,
then episodes at epsilon 0, 0.1, 0.3, 0.5 and 1; more random episodes while the mean is still
>= 200), trains the population of ``configs/training/cqn_cartpole.yaml`` on it with evolution on,
and trains plain behaviour cloning on the same data. One JSON line per seed, then a summary:

    OMP_NUM_THREADS=1 uv run python benchmarks/offline.py --seeds 5 --max-steps 8000

Per seed: the data's mean return, CQN's best greedy evaluation and its curve, gradient steps per
agent until some agent first scored ``max(300, 1.5 x data mean)`` (the learning test's bar),
CQN's training seconds and learning steps/s (all agents), BC's return, and peak RSS.
``success_rate`` is the share of seeds that passed the bar.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.offline.offline_learning import run_check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seed-start", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=None, help="override training.max_steps")
    parser.add_argument("--manifest", type=Path, default=None, help="another CQN manifest (default: the example)")
    args = parser.parse_args()
    passed = 0
    for seed in range(args.seed_start, args.seed_start + args.seeds):
        with tempfile.TemporaryDirectory() as folder:
            extra = {} if args.manifest is None else {"manifest_path": args.manifest}
            result = run_check(seed, Path(folder), max_steps=args.max_steps, **extra)
        ok = result.steps_to_pass is not None
        passed += ok
        print(json.dumps({
            "seed": seed, "data_mean": round(result.data_mean, 1), "data_episodes": result.data_episodes,
            "cqn_best": round(result.cqn_best, 1), "passed": ok, "steps_per_agent_to_bar": result.steps_to_pass,
            "cqn_curve": [round(max(scores), 1) for scores in zip(*result.cqn_history, strict=False)],
            "cqn_seconds": round(result.cqn_seconds, 1),
            "cqn_steps_per_s": round(result.cqn_steps / result.cqn_seconds),
            "bc_return": round(result.bc_return, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        }), flush=True)
    print(json.dumps({"success_rate": passed / args.seeds, "seeds": args.seeds}))


if __name__ == "__main__":
    main()
