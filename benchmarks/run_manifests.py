"""Benchmark example manifests: env steps/s, time to target, peak RSS; plus the random-action floor.

Each case prints one JSON line, so runs can be compared over time:

    OMP_NUM_THREADS=1 uv run python benchmarks/run_manifests.py configs/training/ppo_cartpole.yaml
    OMP_NUM_THREADS=1 uv run python benchmarks/run_manifests.py --floor CartPole-v1 --num-envs 8
    OMP_NUM_THREADS=1 uv run python benchmarks/run_manifests.py --multi-agent-floor mpe2.simple_spread_v3

Multi-agent manifests also report ``random_policy_return``: the mean summed return of a uniformly
random policy over 10 episodes of the same env (the baseline learning claims are measured against).

Each manifest trains in a fresh subprocess (so peak RSS is its own), with `--set` overrides
applied (e.g. `--set training.pop_size=1`; the recurrent-vs-MLP comparison runs
`ppo_recurrent_cartpole.yaml` again with `--set algorithm.name=PPO
--set 'network.encoder_config={hidden_size: [64]}'`).

Fields: ``time_to_target_s`` is the wall time of a run that stopped because every agent reached
``target_score``; ``best_reached_target`` is when the *best* agent first evaluated at or above it
(env steps over the population and per agent, wall seconds), null if it never did;
``best_fitness_curve`` is ``[steps per agent, best fitness so far]`` after each generation.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import csv, json, os, resource, sys, tempfile, time, torch
torch.set_num_threads(1)
from agile_core.overrides import apply_overrides
from agile_core.specs.manifest import validate_source
from agile_core.trainer import LocalTrainer
from agile_core.yaml_source import read_manifest_file
manifest = validate_source(apply_overrides(read_manifest_file(sys.argv[1]), sys.argv[2:]))
metrics = os.path.join(tempfile.mkdtemp(prefix="agile-bench-"), "metrics.csv")
started, started_epoch = time.perf_counter(), time.time()
population, fitnesses = LocalTrainer.from_manifest(manifest).train(verbose=False, csv_path=metrics)
wall = time.perf_counter() - started
steps = sum(agent.steps for agent in population)
target = manifest.training.target_score
pop_size = manifest.training.pop_size
curve = [(int(row["step"]), float(row["value"]), float(row["wall_time"]))
         for row in csv.DictReader(open(metrics)) if row["name"] == "eval/best_fitness"]
first = next(((s, t) for s, v, t in curve if target is not None and v >= target), None)
baseline = None
if manifest.algorithm.name in ("MADDPG", "MATD3", "IPPO"):  # multi-agent: the random policy's return
    from agile_marl.evaluation import random_policy_return
    from agile_marl.run import make_env
    baseline_env = make_env(manifest.environment, base_dir=manifest.base_dir, num_envs=10)
    baseline = round(random_policy_return(baseline_env, loop=1, seed=0), 2)
    baseline_env.close()
print(json.dumps({
    "manifest": sys.argv[1], "overrides": sys.argv[2:], "algorithm": manifest.algorithm.name,
    "env": manifest.environment.name, "pop_size": manifest.training.pop_size,
    "num_envs": manifest.environment.num_envs, "env_steps": steps, "wall_s": round(wall, 2),
    "env_steps_per_s": round(steps / wall, 1), "best_fitness": max(fitnesses),
    "target": target, "target_reached": target is not None and min(fitnesses) >= target,
    "time_to_target_s": round(wall, 2) if target is not None and min(fitnesses) >= target else None,
    "steps_per_agent": max(agent.steps for agent in population),
    "best_reached_target": None if first is None else {
        "env_steps": first[0], "steps_per_agent": first[0] // pop_size, "wall_s": round(first[1] - started_epoch, 2)},
    "best_fitness_curve": [[s // pop_size, round(v, 1)] for s, v, _ in curve],
    "random_policy_return": baseline,
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
}))
"""


def bench_manifest(path: str, overrides: list[str]) -> dict:
    """Train one manifest in a subprocess; return its JSON result."""
    result = subprocess.run([sys.executable, "-c", CHILD, path, *overrides], capture_output=True, text=True)
    if result.returncode != 0:
        return {"manifest": path, "error": result.stderr.strip().splitlines()[-1:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def bench_multi_agent_floor(module: str, num_envs: int, steps: int, config: dict) -> dict:
    """:func:`bench_floor` for a PettingZoo env module (e.g. ``mpe2.simple_spread_v3``), stepped
    through agile's multi-agent vector env."""
    from agile_marl.envs import make_vec_env
    from agile_marl.specs.env import MultiAgentEnvSpec

    env = make_vec_env(MultiAgentEnvSpec(name=module, num_envs=num_envs, config=config), seed=0)
    env.reset(seed=0)
    actions = [env.sample_actions() for _ in range(64)]
    started = time.perf_counter()
    for step in range(steps // num_envs):
        env.step(actions[step % 64])
    wall = time.perf_counter() - started
    env.close()
    return {"floor": module, "config": config, "num_envs": num_envs, "env_steps": steps,
            "env_steps_per_s": round(steps / wall, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def bench_floor(env_id: str, num_envs: int, steps: int) -> dict:
    """Steps/s of the same vector env with random actions and no learning (the ceiling for training)."""
    import gymnasium as gym

    try:
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
        mode = "vector_entry_point"
    except Exception:
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync")
        mode = "sync"
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(256)]
    started = time.perf_counter()
    for step in range(steps // num_envs):
        env.step(actions[step % 256])
    wall = time.perf_counter() - started
    return {"floor": env_id, "mode": mode, "num_envs": num_envs, "env_steps": steps,
            "env_steps_per_s": round(steps / wall, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark cases given on the command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("manifests", nargs="*", help="manifests to train")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="override for every manifest")
    parser.add_argument("--floor", action="append", default=[], metavar="ENV_ID", help="random-action floor of ENV_ID")
    parser.add_argument("--multi-agent-floor", action="append", default=[], metavar="MODULE",
                        help="random-action floor of a PettingZoo env module (e.g. mpe2.simple_spread_v3)")
    parser.add_argument("--env-config", default=None, metavar="JSON", help="constructor kwargs for --multi-agent-floor")
    parser.add_argument("--num-envs", type=int, default=8, help="sub-environments for --floor")
    parser.add_argument("--floor-steps", type=int, default=400_000, help="environment steps for --floor")
    args = parser.parse_args(argv)
    for env_id in args.floor:
        print(json.dumps(bench_floor(env_id, args.num_envs, args.floor_steps)), flush=True)
    for module in args.multi_agent_floor:
        config = json.loads(args.env_config) if args.env_config else {}
        print(json.dumps(bench_multi_agent_floor(module, args.num_envs, args.floor_steps, config)), flush=True)
    for path in args.manifests:
        print(json.dumps(bench_manifest(str(Path(path)), args.overrides)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
