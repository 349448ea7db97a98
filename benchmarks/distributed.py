"""Ray backend benchmark: a PPO CartPole population trained locally and on 1 and 2 Ray workers.

One JSON line per case (and one for starting Ray), so runs can be compared over time:

    OMP_NUM_THREADS=1 uv run python benchmarks/distributed.py                   # pop 8, workers 1 and 2
    OMP_NUM_THREADS=1 uv run python benchmarks/distributed.py --workers 1 2 4 --max-steps 8192

Every case trains the same manifest (``configs/training/ppo_cartpole.yaml`` by default, target
off, ``training.batch_population`` false so that the local run is the agent-by-agent loop the
Ray backend reproduces) in this process: ``local`` with ``LocalTrainer``, ``ray-N`` with
``LocalTrainer(backend="ray")`` on a local Ray instance of ``--ray-cpus`` CPUs started once
(its start-up is reported on its own line, ``ray_init``). ``wall_s`` is the whole ``train``
call (the workers' start-up included), ``steps_per_s`` all members' env steps over it,
``overhead_vs_local`` the relative extra wall time over the local case (at 1 worker that is the
price of the Ray path: worker start-up, agent transfers as safetensors bytes, remote calls).
``same_as_local`` says whether the fitness history equals the local run's (it must, for any
worker count). An untimed tiny local run first takes the one-off import costs out of the figures. On a machine with few cores the speed-up of 2 workers is bounded by them.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _manifest(path: str, overrides: list[str]) -> Any:
    from agile_core.overrides import apply_overrides
    from agile_core.specs.manifest import validate_source
    from agile_core.yaml_source import read_manifest_file

    return validate_source(apply_overrides(read_manifest_file(path), overrides))


def _case(name: str, manifest: Any, **trainer_kwargs: Any) -> tuple[dict[str, Any], list[list[float]]]:
    from agile_core.trainer import LocalTrainer

    trainer = LocalTrainer.from_manifest(manifest, **trainer_kwargs)
    start = time.perf_counter()
    population, _ = trainer.train(verbose=False)
    wall = time.perf_counter() - start
    steps = sum(agent.steps for agent in population)
    row = {"case": name, "pop_size": len(population), "steps": steps, "wall_s": round(wall, 2),
           "steps_per_s": round(steps / wall, 1)}
    return row, [list(agent.fitness) for agent in population]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("manifest", nargs="?", default=str(ROOT / "configs" / "training" / "ppo_cartpole.yaml"))
    parser.add_argument("--pop", type=int, default=8, help="population size (default 8)")
    parser.add_argument("--max-steps", type=int, default=4096, help="env steps per member (default 4096)")
    parser.add_argument("--evo-steps", type=int, default=2048, help="steps per member between evolutions")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Ray worker counts (default 1 2)")
    parser.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray instance (default 2)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)

    import ray

    from agile_core.distributed import RayOptions
    from agile_core.distributed.session import LOCAL_SYSTEM_CONFIG

    overrides = [f"training.pop_size={args.pop}", f"training.max_steps={args.max_steps}",
                 f"training.evo_steps={args.evo_steps}", "training.target_score=null",
                 "training.batch_population=false", *args.overrides]
    manifest = _manifest(args.manifest, overrides)
    # untimed warm-up: the first run in a process pays for imports and first-call set-up
    _case("warm-up", _manifest(args.manifest, [*overrides, "training.pop_size=2", "training.max_steps=256",
                                               "training.evo_steps=256"]))
    local, reference = _case("local", manifest)
    print(json.dumps(local), flush=True)
    start = time.perf_counter()
    ray.init(address="local", num_cpus=args.ray_cpus, include_dashboard=False, logging_level=logging.WARNING,
             _system_config=LOCAL_SYSTEM_CONFIG)
    print(json.dumps({"case": "ray_init", "wall_s": round(time.perf_counter() - start, 2)}), flush=True)
    try:
        for workers in args.workers:
            cpus_per_worker = min(1.0, args.ray_cpus / workers)  # more workers than CPUs share them
            row, history = _case(f"ray-{workers}", manifest, backend="ray",
                                 ray_options=RayOptions(workers=workers, cpus_per_worker=cpus_per_worker))
            row["workers"] = workers
            row["overhead_vs_local"] = round(row["wall_s"] / local["wall_s"] - 1.0, 3)
            row["speedup_vs_local"] = round(local["wall_s"] / row["wall_s"], 3)
            row["same_as_local"] = history == reference
            print(json.dumps(row), flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
