"""Greedy evaluation of a policy in a Gymnasium vector env."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

from agile_core.training.envs import as_vector_env, swap_image_channels

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
    if loop < 1:
        raise ValueError(f"loop must be >= 1, got {loop}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
    vec = as_vector_env(env)
    returns: list[float] = []
    for round_index in range(loop):
        obs, info = vec.reset(seed=seed if round_index == 0 else None)
        episode_return = np.zeros(vec.num_envs, dtype=np.float64)
        finished = np.zeros(vec.num_envs, dtype=bool)
        steps = 0
        while not finished.all():
            actions = act(swap_image_channels(obs) if swap_channels else obs, info)
            obs, reward, terminated, truncated, info = vec.step(actions)
            steps += 1
            episode_return += np.where(finished, 0.0, np.asarray(reward, dtype=np.float64))
            finished |= np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
            if max_steps is not None and steps >= max_steps:
                finished[:] = True
        returns.extend(episode_return.tolist())
    return float(np.mean(returns))
