"""Env steps per second of the batched MPE (`agile_marl.mpe`) against mpe2 through `PettingZooVecEnv`.

    OMP_NUM_THREADS=1 uv run python benchmarks/mpe_throughput.py
    OMP_NUM_THREADS=1 uv run python benchmarks/mpe_throughput.py --scenarios simple_tag_v3 \\
        --num-envs 16 256 1024 --seconds 3 --continuous

Both vector envs are built by `agile_marl.envs.make_vec_env` from the same spec but for the
module (`mpe2.<scenario>` or `agile_marl.mpe.<scenario>`), reset with one seed and stepped with
the same pre-sampled random actions (autoresets included). A figure is sub-env steps per second
(vector steps x sub-envs / wall seconds), the best of `--repeats` timed runs of `--seconds`
each, the two envs alternating. Prints a markdown table with the ratio batched / mpe2.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from agile_marl.envs import make_vec_env
from agile_marl.specs.env import MultiAgentEnvSpec

DEFAULT_SCENARIOS = ("simple_spread_v3", "simple_speaker_listener_v4")
ACTION_POOL = 32


def build(package: str, scenario: str, num_envs: int, continuous: bool) -> Any:
    """The vector env of `package.scenario` with `num_envs` sub-envs."""
    spec = MultiAgentEnvSpec(name=f"{package}.{scenario}", num_envs=num_envs,
                             config={"continuous_actions": continuous})
    return make_vec_env(spec, seed=0, check=False)


def steps_per_second(env: Any, actions: list[dict[str, Any]], seconds: float) -> float:
    """Sub-env steps per second of `env` stepped for about `seconds` (after a one-episode warm-up)."""
    env.reset(seed=0)
    for step in range(25):
        env.step(actions[step % len(actions)])
    steps, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(10):
            env.step(actions[steps % len(actions)])
            steps += 1
    return steps * env.num_envs / elapsed


def measure(scenario: str, num_envs: int, continuous: bool, seconds: float, repeats: int) -> dict[str, Any]:
    """The best steps per second of mpe2 and of the batched MPE for one scenario and size."""
    envs = {"mpe2": build("mpe2", scenario, num_envs, continuous),
            "batched": build("agile_marl.mpe", scenario, num_envs, continuous)}
    envs["batched"].seed_action_spaces(0)
    actions = [envs["batched"].sample_actions() for _ in range(ACTION_POOL)]
    best = dict.fromkeys(envs, 0.0)
    for _ in range(repeats):
        for name, env in envs.items():
            best[name] = max(best[name], steps_per_second(env, actions, seconds))
    for env in envs.values():
        env.close()
    return {"scenario": scenario, "num_envs": num_envs, **best, "ratio": best["batched"] / best["mpe2"]}


def table(results: Sequence[dict[str, Any]], continuous: bool) -> str:
    """The results as a markdown table."""
    actions = "continuous" if continuous else "discrete"
    lines = [f"| scenario ({actions} actions) | sub-envs | mpe2 steps/s | batched steps/s | batched / mpe2 |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['scenario']} | {r['num_envs']} | {r['mpe2']:,.0f} | {r['batched']:,.0f} | {r['ratio']:.1f}x |"
              for r in results]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", default=list(DEFAULT_SCENARIOS),
                        help="mpe2 scenario module names (default: %(default)s)")
    parser.add_argument("--num-envs", nargs="+", type=int, default=[16, 256], help="sub-env counts (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one timed run (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per env, the best counts (default: %(default)s)")
    parser.add_argument("--continuous", action="store_true", help="continuous actions (default: discrete)")
    args = parser.parse_args(argv)
    results = [measure(scenario, num_envs, args.continuous, args.seconds, args.repeats)
               for scenario in args.scenarios for num_envs in args.num_envs]
    print(table(results, args.continuous), flush=True)
    return results


if __name__ == "__main__":
    main()
