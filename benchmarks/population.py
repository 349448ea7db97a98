"""Population benchmarks: what a population costs compared with one agent, batched and not.

One JSON line per case, so runs can be compared over time:

    OMP_NUM_THREADS=1 uv run python benchmarks/population.py learn            # DQN learn step, pop 1/4/8
    OMP_NUM_THREADS=1 uv run python benchmarks/population.py learn --algorithm td3   # TD3 learn step
    OMP_NUM_THREADS=1 uv run python benchmarks/population.py learn --algorithm ppo   # PPO update, pop 1/4/8
    OMP_NUM_THREADS=1 uv run python benchmarks/population.py learn --algorithm recurrent_ppo --pops 4
    OMP_NUM_THREADS=1 uv run python benchmarks/population.py learn --algorithm rainbow --pops 4  # PER + n-step
    OMP_NUM_THREADS=1 uv run python benchmarks/population.py train configs/training/dqn_cartpole.yaml \\
        --pops 1 4 8 --set training.target_score=null
    OMP_NUM_THREADS=1 uv run python benchmarks/population.py train configs/training/td3_pendulum.yaml \\
        --pops 4 --batching side-by-side --set training.target_score=null
    OMP_NUM_THREADS=1 uv run python benchmarks/population.py floor CartPole-v1 --num-envs 8

``learn``: CPU milliseconds per learning step of P identical-architecture DQN agents, one by one
(``DQN.learn`` per agent: a group of one each) and as one group (``DQN.learn_population`` on a
``MemberGroup`` of P), with the ratio to one agent's ``DQN.learn`` (``--algorithm td3``: the same
for TD3 on Pendulum-sized spaces; ``--algorithm ppo``: one PPO update, ``update_epochs`` passes over a
1024-row rollout, ``PPO.learn`` per agent vs ``PPO.learn_population`` of a ``MemberGroup``;
``--algorithm rainbow``: Rainbow DQN learning from prioritized replay with an n-step companion,
sampling and priority write-back included, timed in process CPU time with the two ways alternated,
medians of several rounds, so a busy machine disturbs the ratio less).
``train``: ``agile train --profile`` in a subprocess per (pop size,
batching on/off); ``wall_s`` is the whole process (start-up included), ``steps_per_s`` all
agents' env steps over that wall time (``steps_per_cpu_s`` over the process's CPU time, a steadier
figure on a busy machine), ``updates_per_s`` learning steps over it, ``peak_rss_mb``
the child's peak RSS and ``profile`` the share of the profiled wall time per section
(``overhead_share`` = time outside env stepping, acting, sampling and learning, i.e. the
framework's own bookkeeping plus evaluation, evolution, checkpoints, logging and setup;
``loop_overhead_share`` the same without setup, i.e. of the training loop alone);
``learn_calls`` counts learning calls (one per group and round when batched, one per agent and
step otherwise). ``--batching side-by-side`` runs the one-by-one run on one core while batched runs
repeat on the other until it ends, and prints the ratio of their CPU times (the one-by-one run's
over the median batched run's): on a machine whose speed drifts between runs minutes apart, both
ways then see the same minutes. ``floor``: the same vector env stepped with
random actions and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

RSS_CHILD = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[1:])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(usage.ru_maxrss, code, usage.ru_utime + usage.ru_stime)
"""


def _per_call_ms(fn: Callable[[], object], warmup: int, repeats: int) -> float:
    """Milliseconds per call of `fn` after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def _alternated_cpu_ms(cases: dict[int, tuple[Callable[[], object], Callable[[], object]]], repeats: int,
                       rounds: int = 5, warmup: int = 10) -> dict[int, tuple[float, float]]:
    """Median process-CPU milliseconds per call of each pop size's ``(one_by_one, stacked)`` pair,
    timed in `rounds` rounds of `repeats` calls that alternate over every pair and both ways, so a
    drift of the machine's speed falls on all of them alike."""
    import statistics

    def cpu_ms(fn: Callable[[], object]) -> float:
        start = time.process_time()
        for _ in range(repeats):
            fn()
        return (time.process_time() - start) / repeats * 1e3

    for pair in cases.values():
        for fn in pair:
            for _ in range(warmup):
                fn()
    times: dict[int, tuple[list[float], list[float]]] = {pop: ([], []) for pop in cases}
    for _ in range(rounds):
        for pop, (one_by_one, stacked) in cases.items():
            times[pop][0].append(cpu_ms(one_by_one))
            times[pop][1].append(cpu_ms(stacked))
    return {pop: (statistics.median(loops), statistics.median(stacks)) for pop, (loops, stacks) in times.items()}


def _print_learn_cases(algorithm: str, medians: dict[int, tuple[float, float]], batch_size: int, hidden: int) -> None:
    """A line per pop size (the first one's one-by-one cost per agent is "one agent"), then the fit."""
    first = min(medians)
    single = medians[first][0] / first
    for pop, (loop_ms, stacked_ms) in sorted(medians.items()):
        _print_learn_case(algorithm, pop, batch_size, hidden, loop_ms, stacked_ms, single, digits=3)
    _print_fit(algorithm, [(pop, stacked_ms) for pop, (_, stacked_ms) in medians.items()])


def _print_learn_case(algorithm: str, pop: int, batch_size: int, hidden: int, loop_ms: float, stacked_ms: float,
                      single: float, digits: int) -> None:
    """One JSON line comparing one-by-one and stacked learning with one agent's cost."""
    import torch

    print(json.dumps({"case": "learn", "algorithm": algorithm, "pop_size": pop, "batch_size": batch_size,
                      "hidden": hidden, "threads": torch.get_num_threads(),
                      "one_by_one_ms": round(loop_ms, digits), "stacked_ms": round(stacked_ms, digits),
                      "one_agent_ms": round(single, digits), "stacked_vs_one_agent": round(stacked_ms / single, 2),
                      "one_by_one_vs_one_agent": round(loop_ms / single, 2)}), flush=True)


def _print_fit(algorithm: str, points: list[tuple[int, float]]) -> None:
    """With two or more population sizes: the least-squares line ``stacked_ms = fixed + per_member * P``
    and the ratio it implies over agents one by one when each costs ``fixed + per_member`` (the
    ``P = 1`` case of the same step): ``P (fixed + per_member) / (fixed + P * per_member)``. Work done
    once per call (``fixed``) is paid once by a group but P times one by one, work done per member is
    paid P times either way: a saving in the per-call work speeds up both and narrows the ratio, a
    saving in the per-member work widens it."""
    if len({pop for pop, _ in points}) < 2:
        return
    import numpy as np

    pops = np.array([pop for pop, _ in points], dtype=float)
    per_member, fixed = (float(value) for value in np.polyfit(pops, np.array([ms for _, ms in points]), 1))
    ratios = {str(pop): round(pop * (fixed + per_member) / (fixed + pop * per_member), 2)
              for pop in sorted({pop for pop, _ in points})}
    print(json.dumps({"case": "learn_fit", "algorithm": algorithm, "fixed_ms": round(fixed, 3),
                      "per_member_ms": round(per_member, 3), "implied_one_by_one_over_stacked": ratios}), flush=True)


def bench_learn(algorithm: str, pops: list[int], repeats: int, batch_size: int, hidden: int,
                first_member: str = "same") -> None:
    """Per-step cost of P off-policy agents (DQN on CartPole-sized spaces, TD3 on Pendulum-sized
    ones) learning, one by one vs stacked, in process CPU time: medians of rounds that alternate
    over every pop size and both ways (see :func:`_alternated_cpu_ms`); `first_member` "new-layer"
    or "new-nodes" gives the first agent an architecture mutation of that kind (a mixed group pads
    to it)."""
    import numpy as np
    from gymnasium import spaces

    from agile_core.algorithms.group import MemberGroup
    from agile_offpolicy.buffers import ReplayBuffer
    from agile_offpolicy.population import make_groups, sample_padded

    net = {"latent_dim": hidden, "encoder_config": {"hidden_size": [hidden]}, "head_config": {"hidden_size": [hidden]}}
    rng = np.random.default_rng(0)
    rows = 10_000
    if algorithm == "dqn":
        from agile_offpolicy.dqn import DQN

        obs_space, act_space = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2)
        actions = rng.integers(0, 2, rows)

        def make(seed: int) -> object:
            return DQN(obs_space, act_space, net_config=net, seed=seed, batch_size=batch_size, lr=1e-3)
    else:
        from agile_offpolicy.td3 import TD3

        obs_space, act_space = spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-2.0, 2.0, (1,), np.float32)
        actions = rng.uniform(-2, 2, (rows, 1)).astype(np.float32)

        def make(seed: int) -> object:
            return TD3(obs_space, act_space, net_config=net, seed=seed, batch_size=batch_size, policy_freq=2)
    dim = obs_space.shape[0]
    memory = ReplayBuffer(20_000, obs_space, act_space)
    memory.add(rng.uniform(-1, 1, (rows, dim)).astype(np.float32), actions, rng.normal(size=rows).astype(np.float32),
               rng.uniform(-1, 1, (rows, dim)).astype(np.float32), rng.random(rows) < 0.05)

    cases = {}
    for pop in pops:
        agents: list = [make(i) for i in range(pop)]
        if first_member != "same":
            agents[0].mutate_architecture(np.random.default_rng(1), 1.0 if first_member == "new-layer" else 0.0)

        def one_by_one(agents: list = agents) -> None:
            for agent in agents:
                agent.learn(memory.sample(agent.batch_size, agent.rng))

        (_, group), = make_groups(agents)

        def stacked(group: MemberGroup = group, active: list[bool] = [True] * pop) -> None:
            group.algorithm.learn_population(group, sample_padded(memory, group.members, active, "cpu"), active)

        cases[pop] = (one_by_one, stacked)
    _print_learn_cases(algorithm.upper(), _alternated_cpu_ms(cases, repeats), batch_size, hidden)


def bench_learn_rainbow(pops: list[int], repeats: int, batch_size: int, hidden: int, rounds: int = 5) -> None:
    """Per-step CPU cost of P Rainbow agents learning from PER + n-step memories (sampling and
    priority write-back included), one by one (``ReplayMemories.learn``: ``RainbowDQN.learn`` per
    agent) vs stacked (one ``learn_population`` of a ``MemberGroup`` per step); `rounds` alternated
    rounds of `repeats` steps each way, medians."""

    import numpy as np
    from gymnasium import spaces

    from agile_core.algorithms.group import MemberGroup
    from agile_offpolicy.buffers import MultiStepReplayBuffer, PrioritizedReplayBuffer
    from agile_offpolicy.population import ReplayMemories, make_groups
    from agile_offpolicy.rainbow import RainbowDQN

    obs_space, act_space = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2)
    net = {"latent_dim": hidden, "encoder_config": {"hidden_size": [hidden]}, "head_config": {"hidden_size": [hidden]}}
    rng, num_envs = np.random.default_rng(0), 8
    memories = ReplayMemories(PrioritizedReplayBuffer(20_000, obs_space, act_space),
                              MultiStepReplayBuffer(20_000, obs_space, act_space, n_step=3, gamma=0.99,
                                                    num_envs=num_envs), max_steps=100_000)
    for _ in range(1250):
        ended = rng.random(num_envs) < 0.05
        memories.add(rng.uniform(-1, 1, (num_envs, 4)).astype(np.float32), rng.integers(0, 2, num_envs),
                     rng.normal(size=num_envs).astype(np.float32), rng.uniform(-1, 1, (num_envs, 4)).astype(np.float32),
                     ended, np.zeros(num_envs, dtype=bool), np.ones(num_envs, dtype=bool))

    cases = {}
    for pop in pops:
        agents = [RainbowDQN(obs_space, act_space, net_config=net, seed=i, batch_size=batch_size, lr=1e-4)
                  for i in range(pop)]
        (_, group), = make_groups(agents)

        def one_by_one(agents: list[RainbowDQN] = agents) -> None:
            for agent in agents:
                memories.learn(agent)

        def stacked(group: MemberGroup = group, active: list[bool] = [True] * pop) -> None:
            batch = memories.sample_population(group.members, active, "cpu")
            memories.write_back(batch.indices, RainbowDQN.learn_population(group, batch, active))

        cases[pop] = (one_by_one, stacked)
    _print_learn_cases("RAINBOW", _alternated_cpu_ms(cases, repeats, rounds), batch_size, hidden)


def bench_learn_ppo(pops: list[int], repeats: int, batch_size: int, hidden: int, recurrent: bool = False) -> None:
    """Cost of one PPO update (4 epochs over a 128 x 8 rollout) of P agents, one by one vs stacked
    (`recurrent`: LSTM encoders learning from BPTT sequences of 32 steps)."""
    import numpy as np
    from gymnasium import spaces

    from agile_core.algorithms.group import MemberGroup
    from agile_onpolicy.ppo import PPO

    obs_space, act_space = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2)
    encoder = {"hidden_state_size": hidden} if recurrent else {"hidden_size": [hidden]}
    net = {"latent_dim": hidden, "encoder_config": encoder, "head_config": {"hidden_size": [hidden]}}
    options = {"recurrent": True, "max_seq_len": 32} if recurrent else {}
    num_envs, rng = 8, np.random.default_rng(0)

    def rollout(agent: PPO) -> object:
        buffer = agent.create_rollout_buffer(num_envs)
        state = agent.initial_hidden(num_envs) if recurrent else None
        for _ in range(buffer.num_steps):
            obs = rng.uniform(-1, 1, (num_envs, 4)).astype(np.float32)
            action, log_prob, _, value, *new = agent.get_action(obs, hidden_state=state)
            buffer.add(obs, action, rng.normal(size=num_envs), rng.random(num_envs) < 0.05,
                       np.zeros(num_envs, dtype=bool), value, log_prob, np.ones(num_envs, dtype=bool), hidden=state)
            state = new[0] if recurrent else None
        buffer.compute_returns_and_advantages(np.zeros(num_envs, dtype=np.float32))
        return buffer

    single: float | None = None
    points: list[tuple[int, float]] = []
    for pop in pops:
        agents = [PPO(obs_space, act_space, net_config=net, seed=i, learn_step=1024, batch_size=batch_size, lr=1e-3,
                      update_epochs=4, ent_coef=0.0, **options) for i in range(pop)]
        buffers = [rollout(agent) for agent in agents]

        def one_by_one(agents: list[PPO] = agents, buffers: list[object] = buffers) -> None:
            for agent, buffer in zip(agents, buffers, strict=True):
                agent.learn(buffer)  # type: ignore[arg-type]

        loop_ms = _per_call_ms(one_by_one, 1, repeats)
        group = MemberGroup(agents)

        def stacked(group: MemberGroup = group, buffers: list[object] = buffers) -> None:
            PPO.learn_population(group, buffers, [True] * len(buffers))  # type: ignore[arg-type]

        stacked_ms = _per_call_ms(stacked, 1, repeats)
        if single is None:
            single = loop_ms / pop
        _print_learn_case("RECURRENT_PPO" if recurrent else "PPO", pop, batch_size, hidden, loop_ms, stacked_ms, single,
                          digits=2)
        points.append((pop, stacked_ms))
    _print_fit("RECURRENT_PPO" if recurrent else "PPO", points)


def _start_train(manifest: str, pop: int, batch: bool, overrides: list[str]) -> tuple[subprocess.Popen[str], str, float]:
    """Launch one whole-process ``agile train --profile`` (in a child that reports its peak RSS and CPU time)."""
    run_dir = tempfile.mkdtemp(prefix="agile-pop-bench-")
    command = [sys.executable, "-m", "agile_cli.main", "train", manifest, "--quiet", "--profile",
               "--run-dir", run_dir, "--set", f"training.pop_size={pop}",
               "--set", f"training.batch_population={str(batch).lower()}"]
    for override in overrides:
        command += ["--set", override]
    process = subprocess.Popen([sys.executable, "-c", RSS_CHILD, *command], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    return process, run_dir, time.perf_counter()


def _finish_train(run: tuple[subprocess.Popen[str], str, float], manifest: str, pop: int, batch: bool,
                  overrides: list[str]) -> dict[str, object] | None:
    """Wait for a run of :func:`_start_train` and print its JSON line; return it (None if it failed)."""
    process, run_dir, started = run
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - started
    last = stdout.strip().splitlines()[-1].split() if stdout.strip() else ["0", "1", "0"]
    rss_kb, code, cpu = int(last[0]), int(last[1]), float(last[2])
    if code != 0:
        print(json.dumps({"case": "train", "manifest": manifest, "pop_size": pop, "batched": batch,
                          "error": stderr[-2000:]}), flush=True)
        return None
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    profile = json.loads((Path(run_dir) / "profile.json").read_text())
    steps = summary["total_steps"]
    updates = sum(agent.get("learn_steps", 0) for agent in summary["agents"])
    core = sum(profile[name]["share"] for name in ("env", "act", "sample", "learn"))
    training = profile["total"]["seconds"] - profile["setup"]["seconds"]
    loop_core = sum(profile[name]["seconds"] for name in ("env", "act", "sample", "learn"))
    result = {
        "case": "train", "manifest": manifest, "overrides": overrides, "pop_size": pop, "batched": batch,
        "env_steps": steps, "wall_s": round(wall, 2), "steps_per_s": round(steps / wall),
        "cpu_s": round(cpu, 2), "steps_per_cpu_s": round(steps / cpu) if cpu else None,
        "updates_per_s": round(updates / wall, 1), "peak_rss_mb": round(rss_kb / 1024, 1),
        "best_fitness": max(agent["fitness"] for agent in summary["agents"]),
        "target_reached": summary["target_reached"],
        "profile": {name: row["share"] for name, row in profile.items() if name != "total"},
        "learn_calls": profile["learn"]["calls"],
        "overhead_share": round(1.0 - core, 3),
        "loop_overhead_share": round(1.0 - loop_core / training, 3) if training > 0 else None,
    }
    print(json.dumps(result), flush=True)
    return result


def bench_train(manifest: str, pops: list[int], batching: list[bool], overrides: list[str]) -> None:
    """Whole-process `agile train` runs, one after the other."""
    for pop in pops:
        for batch in batching:
            _finish_train(_start_train(manifest, pop, batch, overrides), manifest, pop, batch, overrides)


def bench_train_side_by_side(manifest: str, pops: list[int], overrides: list[str]) -> None:
    """For each pop size, the one-by-one run on one core while batched runs follow each other on the
    other, until it ends: both ways see the same machine over the same minutes (this machine's speed
    drifts by a third between runs minutes apart). Prints every run, then the ratio of the one-by-one
    run's CPU time to the median batched run's (compare CPU times: the one-by-one run's ``wall_s``
    runs until the last batched run ends)."""
    import statistics

    for pop in pops:
        alone = _start_train(manifest, pop, False, overrides)
        batched: list[float] = []
        while True:
            result = _finish_train(_start_train(manifest, pop, True, overrides), manifest, pop, True, overrides)
            if result is None:
                break
            batched.append(float(result["cpu_s"]))  # type: ignore[arg-type]
            if alone[0].poll() is not None:
                break
        one_by_one = _finish_train(alone, manifest, pop, False, overrides)
        if one_by_one is None or not batched:
            continue
        median = statistics.median(batched)
        print(json.dumps({"case": "train_side_by_side", "manifest": manifest, "overrides": overrides, "pop_size": pop,
                          "batched_cpu_s": batched, "one_by_one_cpu_s": one_by_one["cpu_s"],
                          "one_by_one_over_batched": round(float(one_by_one["cpu_s"]) / median, 2)}),  # type: ignore[arg-type]
              flush=True)


def bench_floor(env_id: str, num_envs: int, steps: int) -> None:
    """Random actions in the same kind of vector env the trainer builds."""
    from agile_core.environments import make_vector_env
    from agile_core.specs.env import GymEnvSpec

    env = make_vector_env(GymEnvSpec(name=env_id, num_envs=num_envs))
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(64)]
    started = time.perf_counter()
    for step in range(steps):
        env.step(actions[step % 64])
    wall = time.perf_counter() - started
    print(json.dumps({"case": "floor", "env": env_id, "num_envs": num_envs, "vector_type": type(env).__name__,
                      "steps_per_s": round(steps * num_envs / wall)}), flush=True)
    env.close()


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run one benchmark kind."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True)
    learn = sub.add_parser("learn", help="DQN learn step or PPO update, one by one vs stacked")
    learn.add_argument("--algorithm", choices=["dqn", "td3", "ppo", "recurrent_ppo", "rainbow"], default="dqn")
    learn.add_argument("--pops", type=int, nargs="+", default=[1, 4, 8])
    learn.add_argument("--repeats", type=int, default=None, help="timed steps per round (default: DQN/TD3 100, Rainbow 100, PPO 5 updates)")
    learn.add_argument("--batch-size", type=int, default=None, help="default: DQN 64, TD3 and PPO 128")
    learn.add_argument("--hidden", type=int, default=64)
    learn.add_argument("--first-member", choices=["same", "new-layer", "new-nodes"], default="same",
                       help="DQN/TD3: give the first agent an architecture mutation (a mixed group)")
    train = sub.add_parser("train", help="whole-process agile train runs")
    train.add_argument("manifest")
    train.add_argument("--pops", type=int, nargs="+", default=[1, 4, 8])
    train.add_argument("--batching", choices=["on", "off", "both", "side-by-side"], default="both",
                       help="side-by-side: one by one on one core while batched runs repeat on the other")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    floor = sub.add_parser("floor", help="random actions, no learning")
    floor.add_argument("env")
    floor.add_argument("--num-envs", type=int, default=8)
    floor.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args(argv)
    if args.kind == "learn" and args.algorithm == "rainbow":
        bench_learn_rainbow(args.pops, args.repeats or 100, args.batch_size or 64, args.hidden)
    elif args.kind == "learn" and args.algorithm in ("ppo", "recurrent_ppo"):
        bench_learn_ppo(args.pops, args.repeats or 5, args.batch_size or (256 if args.algorithm == "recurrent_ppo" else 128),
                        args.hidden, recurrent=args.algorithm == "recurrent_ppo")
    elif args.kind == "learn":
        bench_learn(args.algorithm, args.pops, args.repeats or 100,
                    args.batch_size or (64 if args.algorithm == "dqn" else 128), args.hidden, args.first_member)
    elif args.kind == "train" and args.batching == "side-by-side":
        bench_train_side_by_side(args.manifest, args.pops, args.overrides)
    elif args.kind == "train":
        modes = {"on": [True], "off": [False], "both": [True, False]}[args.batching]
        bench_train(args.manifest, args.pops, modes, args.overrides)
    else:
        bench_floor(args.env, args.num_envs, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
