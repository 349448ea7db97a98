"""Greedy evaluation of a policy in a Gymnasium vector env."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

from agile_core.errors import ManifestError, ManifestIssue
from agile_core.training.envs import as_vector_env, swap_image_channels
from agile_core.training.profiling import PROFILER

UNCAPPED_EPISODE_LIMIT = 27_000
"""Vector steps an evaluation episode may take when nothing caps it (no ``training.eval_steps``,
no time limit): an environment whose episodes never end fails here, after seconds, instead of
hanging the run. The figure is the usual Atari cap (108,000 frames at frame skip 4); an
environment with longer episodes sets ``eval_steps``."""


def check_episode_length(steps: int, max_steps: int | None) -> None:
    """ManifestError on ``training.eval_steps`` once an uncapped evaluation episode has run
    `UNCAPPED_EPISODE_LIMIT` vector steps without ending."""
    if max_steps is None and steps >= UNCAPPED_EPISODE_LIMIT:
        raise ManifestError([ManifestIssue(
            ("training", "eval_steps"),
            f"an evaluation episode ran {steps:,} steps without terminating or truncating and nothing caps it: "
            "set training.eval_steps, or give the environment a time limit (the wrapper "
            "gymnasium.wrappers.TimeLimit with max_episode_steps)")])

ActFn = Callable[[Any, dict[str, Any]], Any]
"""``act(obs, info) -> actions``: batched actions for batched observations (and the step's info)."""


def evaluate_policy(
    env: gym.Env | VectorEnv,
    act: ActFn,
    *,
    loop: int = 1,
    max_steps: int | None = None,
    swap_channels: bool = False,
    seed: int | None = None,
) -> float:
    """Mean undiscounted return of `loop` x ``num_envs`` evaluation episodes.

    Each of the `loop` rounds resets the env and steps every sub-env until its first episode
    ends (terminated, truncated, or `max_steps` vector steps reached); each sub-env contributes
    exactly that one episode per round, so short episodes are not over-represented. Whatever a
    sub-env does after its episode ended (the next-step autoreset, a new episode) is ignored.
    `seed` seeds the first reset only. The env is left in the middle of episodes: callers that
    keep training in it must reset it.
    """
    returns = episode_returns(env, act, loop=loop, max_steps=max_steps, swap_channels=swap_channels, seed=seed)
    return float(np.mean(returns))


def episode_returns(
    env: gym.Env | VectorEnv,
    act: ActFn,
    *,
    loop: int = 1,
    max_steps: int | None = None,
    swap_channels: bool = False,
    seed: int | None = None,
    round_start: Callable[[], None] | None = None,
) -> np.ndarray:
    """The returns ``[loop, num_envs]`` behind :func:`evaluate_policy` (one episode per sub-env and
    round); `round_start` is called before each round."""
    if loop < 1:
        raise ValueError(f"loop must be >= 1, got {loop}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
    vec = as_vector_env(env)
    returns = np.zeros((loop, vec.num_envs), dtype=np.float64)
    for round_index in range(loop):
        if round_start is not None:
            round_start()
        with PROFILER.env:
            obs, info = vec.reset(seed=seed if round_index == 0 else None)
        episode_return = returns[round_index]
        finished = np.zeros(vec.num_envs, dtype=bool)
        steps = 0
        while not finished.all():
            with PROFILER.act:
                actions = act(swap_image_channels(obs) if swap_channels else obs, info)
            with PROFILER.env:
                obs, reward, terminated, truncated, info = vec.step(actions)
            steps += 1
            episode_return += np.where(finished, 0.0, np.asarray(reward, dtype=np.float64))
            finished |= np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
            if max_steps is not None and steps >= max_steps:
                finished[:] = True
            elif not finished.all():
                check_episode_length(steps, max_steps)
    return returns


def evaluate_population_batched(
    population: Sequence[Any],
    env: gym.Env | VectorEnv,
    act: ActFn,
    *,
    loop: int = 1,
    max_steps: int | None = None,
    swap_channels: bool = False,
    round_start: Callable[[], None] | None = None,
) -> list[float]:
    """Evaluate a whole population in one vector env whose sub-envs are split into equal,
    consecutive slices, one per agent; `act` answers for all of them at once.

    Each agent's fitness is the mean over its slice (the same number of episodes as
    :func:`evaluate_policy` gives one agent in a slice-sized env) and is appended to its
    ``fitness`` like ``agent.test`` does. `round_start` is called before each round's reset
    (e.g. to zero recurrent states).
    """
    returns = episode_returns(env, act, loop=loop, max_steps=max_steps, swap_channels=swap_channels,
                              round_start=round_start)
    per_agent = returns.reshape(loop, len(population), -1)
    fitnesses = [float(per_agent[:, index].mean()) for index in range(len(population))]
    for agent, fitness in zip(population, fitnesses, strict=True):
        agent.fitness.append(fitness)
    return fitnesses
