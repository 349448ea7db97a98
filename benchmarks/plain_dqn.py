"""The yardstick for one agent: a DQN learning step written the straightforward way (one MLP Q
network with LayerNorm like agile's, a target copy, Adam, double-DQN targets, MSE, gradient-norm
clipping, a soft target update), timed against agile's population-shaped step for P = 1
(``DQN.learn``) and for the batched group (``learn_population`` of one member), on the same
sampled batches, in process CPU time with the three alternated (medians of rounds):

    OMP_NUM_THREADS=1 uv run python benchmarks/plain_dqn.py --hidden 64 --batch-size 64

It lives in ``benchmarks/`` on purpose: it is the measure of agile's per-call overhead, not a
second implementation to train with.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn


class PlainDQN:
    """One DQN agent, the textbook way (CartPole-sized: 4 inputs, 2 actions)."""

    def __init__(self, hidden: int, lr: float = 1e-3, gamma: float = 0.99, tau: float = 0.005) -> None:
        def network() -> nn.Module:
            return nn.Sequential(nn.Linear(4, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.LayerNorm(hidden),
                                 nn.ReLU(), nn.Linear(hidden, 2))

        self.q, self.target = network(), network()
        self.target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)
        self.gamma, self.tau = gamma, tau

    def learn(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
              dones: torch.Tensor) -> float:
        with torch.no_grad():
            best = self.q(next_obs).argmax(dim=1, keepdim=True)
            target = rewards + self.gamma * (1 - dones) * self.target(next_obs).gather(1, best).squeeze(1)
        q = self.q(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        loss = nn.functional.mse_loss(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), 10.0)
        self.optimizer.step()
        with torch.no_grad():
            for p, t in zip(self.q.parameters(), self.target.parameters(), strict=True):
                t.lerp_(p, self.tau)
        return loss.item()


def _cpu_ms(fn: Callable[[], object], repeats: int) -> float:
    start = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - start) * 1000 / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=200, help="learning steps per timed round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from gymnasium import spaces

    from agile_offpolicy.buffers import ReplayBuffer
    from agile_offpolicy.dqn import DQN
    from agile_offpolicy.population import make_groups, sample_padded

    rng = np.random.default_rng(0)
    rows = 10_000
    obs_space, act_space = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2)
    memory = ReplayBuffer(20_000, obs_space, act_space)
    memory.add(rng.uniform(-1, 1, (rows, 4)).astype(np.float32), rng.integers(0, 2, rows),
               rng.normal(size=rows).astype(np.float32), rng.uniform(-1, 1, (rows, 4)).astype(np.float32),
               rng.random(rows) < 0.05)
    net = {"latent_dim": args.hidden, "max_latent_dim": max(128, args.hidden),
           "encoder_config": {"hidden_size": [args.hidden]},
           "head_config": {"hidden_size": [args.hidden]}}
    agent = DQN(obs_space, act_space, net_config=net, seed=0, batch_size=args.batch_size, lr=1e-3)
    (_, group), = make_groups([agent])
    plain = PlainDQN(args.hidden)

    def plain_step() -> None:  # the same buffer and sampling: only the learning step differs
        batch = memory.sample(args.batch_size, rng)
        plain.learn(batch.obs, batch.action, batch.reward, batch.next_obs, batch.done)

    cases = {
        "plain": plain_step,
        "agile_learn": lambda: agent.learn(memory.sample(agent.batch_size, agent.rng)),
        "agile_group": lambda: group.algorithm.learn_population(group, sample_padded(memory, group.members, [True],
                                                                                     "cpu"), [True]),
    }
    for fn in cases.values():  # warm-up
        _cpu_ms(fn, 20)
    timings: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            timings[name].append(_cpu_ms(fn, args.repeats))
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print(json.dumps({"hidden": args.hidden, "batch_size": args.batch_size, "ms_per_step": medians,
                      "agile_learn_over_plain": medians["agile_learn"] / medians["plain"],
                      "agile_group_over_plain": medians["agile_group"] / medians["plain"]}))


if __name__ == "__main__":
    main()
