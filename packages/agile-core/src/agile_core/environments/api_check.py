"""Check an environment against the Gymnasium API before training starts.

A custom environment that returns the wrong shape or dtype usually fails deep inside a network
forward pass; this check names the environment, the call and the expected vs actual value instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


class EnvironmentAPIError(ValueError):
    """An environment whose outputs do not match its declared spaces or the Gymnasium API."""


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} and dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"[:120]


def _check_obs(name: str, call: str, space: spaces.Space, obs: Any, path: str = "observation") -> None:
    if isinstance(space, spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            raise EnvironmentAPIError(
                f"{name}: {call} returned {path} {_describe(obs)}; expected a dict with keys {sorted(space.spaces)}"
            )
        for key, sub in space.spaces.items():
            _check_obs(name, call, sub, obs[key], f"{path}[{key!r}]")
        return
    if isinstance(space, spaces.Tuple):
        if not isinstance(obs, tuple) or len(obs) != len(space.spaces):
            raise EnvironmentAPIError(f"{name}: {call} returned {path} {_describe(obs)}; expected a tuple of {len(space.spaces)}")
        for index, sub in enumerate(space.spaces):
            _check_obs(name, call, sub, obs[index], f"{path}[{index}]")
        return
    array = np.asarray(obs)
    if space.shape is not None and array.shape != space.shape:
        raise EnvironmentAPIError(
            f"{name}: {call} returned {path} with shape {array.shape}; the observation space expects {space.shape}"
        )
    if space.dtype is not None and not np.can_cast(array.dtype, space.dtype, casting="same_kind"):
        raise EnvironmentAPIError(
            f"{name}: {call} returned {path} of dtype {array.dtype}; the observation space expects {space.dtype}"
        )


def check_env(env: Any, name: str, steps: int = 3, seed: int = 0) -> None:
    """Reset and step one environment with random actions, checking every output against the
    Gymnasium API and the declared spaces; raise EnvironmentAPIError naming env, call and values."""
    space = env.observation_space
    try:
        result = env.reset(seed=seed)
    except Exception as exc:
        raise EnvironmentAPIError(f"{name}: reset() raised {type(exc).__name__}: {exc}") from exc
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        raise EnvironmentAPIError(f"{name}: reset() must return (observation, info dict); got {_describe(result)}")
    _check_obs(name, "reset()", space, result[0])
    env.action_space.seed(seed)
    for _ in range(steps):
        try:
            result = env.step(env.action_space.sample())
        except Exception as exc:
            raise EnvironmentAPIError(f"{name}: step() raised {type(exc).__name__}: {exc}") from exc
        if not (isinstance(result, tuple) and len(result) == 5):
            count = len(result) if isinstance(result, tuple) else type(result).__name__
            raise EnvironmentAPIError(
                f"{name}: step() must return (observation, reward, terminated, truncated, info); got {count} values"
            )
        obs, reward, terminated, truncated, info = result
        _check_obs(name, "step()", space, obs)
        if not isinstance(reward, int | float | np.number) or isinstance(reward, bool):
            raise EnvironmentAPIError(f"{name}: step() returned reward {_describe(reward)}; expected a float")
        for label, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, bool | np.bool_):
                raise EnvironmentAPIError(f"{name}: step() returned {label} {_describe(flag)}; expected a bool")
        if not isinstance(info, dict):
            raise EnvironmentAPIError(f"{name}: step() returned info {_describe(info)}; expected a dict")
        if terminated or truncated:
            env.reset()
