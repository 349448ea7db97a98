"""Greedy evaluation of a multi-agent population in one widened vector env, and the random-policy
baseline learning claims are measured against."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agile_core.training.evaluation import check_episode_length
from agile_core.training.profiling import PROFILER
from agile_marl.population import Groups, act_groups, current_groups

__all__ = ["episode_returns", "evaluate_population", "random_policy_return"]

ActFn = Callable[[Mapping[str, Any], Mapping[str, Any]], Mapping[str, np.ndarray]]
"""``act(obs, info) -> actions`` for every sub-env of the env."""


def episode_returns(env: Any, act: ActFn, *, loop: int = 1, max_steps: int | None = None,
                    seed: int | None = None) -> dict[str, np.ndarray]:
    """Each agent's return ``[loop, num_envs]``: every round resets the env (with `seed` the
    first time) and runs every sub-env until its first episode ends (or `max_steps` vector
    steps); later steps of a sub-env are not counted."""
    if loop < 1:
        raise ValueError(f"loop must be >= 1, got {loop}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
    returns = {agent: np.zeros((loop, env.num_envs)) for agent in env.agents}
    for round_index in range(loop):
        with PROFILER.env:
            obs, info = env.reset(seed=seed if round_index == 0 else None)
        finished = np.zeros(env.num_envs, dtype=bool)
        steps = 0
        while not finished.all():
            with PROFILER.act:
                actions = act(obs, info)
            with PROFILER.env:
                obs, rewards, _, _, info = env.step(actions)
            steps += 1
            for agent, total in returns.items():
                counted = ~finished & np.asarray(info["valid"][agent], dtype=bool)
                total[round_index] += np.where(counted, np.asarray(rewards[agent], dtype=np.float64), 0.0)
            finished |= np.asarray(info["episode_over"], dtype=bool)
            if max_steps is not None and steps >= max_steps:
                finished[:] = True
            elif not finished.all():
                check_episode_length(steps, max_steps)
    return returns


def evaluate_population(population: Sequence[Any], env: Any, *, loop: int = 1, max_steps: int | None = None,
                        sum_scores: bool = True, groups: Groups | None = None) -> list[float]:
    """Each member's fitness: the mean over `loop` rounds x its sub-envs of one episode's return
    summed over the agents (see :func:`episode_returns`), appended to its ``fitness``. Member
    ``p`` owns sub-envs ``[p * n, (p + 1) * n)`` of `env` (``n = num_envs / len(population)``) and
    acts greedily. With `sum_scores` false every member also gets ``agent_fitness`` (a list of
    per-agent means, the latest last). Selection always uses the sum."""
    members = len(population)
    if env.num_envs % members:
        raise ValueError(f"{env.num_envs} sub-envs cannot be split evenly between {members} members")
    groups = current_groups(population, groups)

    def act(obs: Mapping[str, Any], info: Mapping[str, Any]) -> Mapping[str, np.ndarray]:
        return act_groups(groups, obs, members, training=False, action_masks=info.get("action_mask"))[0]

    returns = episode_returns(env, act, loop=loop, max_steps=max_steps)
    fitnesses = []
    for position, member in enumerate(population):
        per_agent = {agent: float(total.reshape(loop, members, -1)[:, position].mean())
                     for agent, total in returns.items()}
        fitness = float(sum(per_agent.values()))
        member.fitness.append(fitness)
        if not sum_scores:
            member.agent_fitness.append(per_agent)
        fitnesses.append(fitness)
    return fitnesses


def random_policy_return(env: Any, *, loop: int = 1, max_steps: int | None = None, seed: int | None = None) -> float:
    """The mean (over `loop` rounds x sub-envs) of one episode's return summed over the agents,
    every agent acting uniformly at random (its action space sampled, seeded from `seed`)."""
    rng = np.random.default_rng(seed)
    spaces = {agent: env.action_spaces[agent] for agent in env.agents}
    for space in spaces.values():
        space.seed(int(rng.integers(2**31)))

    def act(obs: Mapping[str, Any], info: Mapping[str, Any]) -> Mapping[str, np.ndarray]:
        return {agent: np.stack([space.sample() for _ in range(env.num_envs)]) for agent, space in spaces.items()}

    returns = episode_returns(env, act, loop=loop, max_steps=max_steps, seed=seed)
    return float(np.sum(list(returns.values()), axis=0).mean())
