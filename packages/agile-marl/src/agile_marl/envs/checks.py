"""Check a PettingZoo Parallel env against the API before training starts.

A custom env that gives the wrong keys, shapes or types usually fails deep inside a buffer or a
network; this check names the env, the agent, the call and the expected vs actual value instead.
It runs on a fresh env from the factory (or a deep copy of a given instance) and restores the
global random states, so it never changes a seeded run.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
from collections.abc import Callable, Iterator
from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium import spaces


class ParallelEnvError(ValueError):
    """A parallel env whose outputs do not match its declared spaces or the Parallel API."""


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    return f"{value!r}"[:80] + f" ({type(value).__name__})"


@contextlib.contextmanager
def _global_rng_kept() -> Iterator[None]:
    """Restore Python's, NumPy's and (when loaded) torch's global random states afterwards."""
    py_state, np_state = random.getstate(), np.random.get_state()
    torch = sys.modules.get("torch")
    torch_state = torch.random.get_rng_state() if torch is not None else None
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        if torch is not None and torch_state is not None:
            torch.random.set_rng_state(torch_state)


class _Checker:
    def __init__(self, env: Any, name: str) -> None:
        self.env = env
        self.name = name

    def fail(self, call: str, message: str) -> ParallelEnvError:
        where = f"{call}()" if call in ("reset", "step") else call
        return ParallelEnvError(f"env '{self.name}': {where}: {message}")

    def check_obs(self, call: str, space: spaces.Space, obs: Any, path: str) -> None:
        if isinstance(space, spaces.Dict):
            if not isinstance(obs, dict) or set(obs) != set(space.spaces):
                raise self.fail(call, f"{path} is {_describe(obs)}, expected a dict with keys {sorted(space.spaces)}")
            for key, sub in space.spaces.items():
                self.check_obs(call, sub, obs[key], f"{path}[{key!r}]")
            return
        if isinstance(space, spaces.Tuple):
            if not isinstance(obs, tuple) or len(obs) != len(space.spaces):
                raise self.fail(call, f"{path} is {_describe(obs)}, expected a tuple of {len(space.spaces)}")
            for index, sub in enumerate(space.spaces):
                self.check_obs(call, sub, obs[index], f"{path}[{index}]")
            return
        try:
            array = np.asarray(obs)
        except Exception:
            raise self.fail(call, f"{path} is {_describe(obs)}, expected an array of shape {space.shape}") from None
        if space.shape is not None and array.shape != space.shape:
            raise self.fail(call, f"{path} has shape {array.shape}, expected {space.shape} (the observation space)")
        if space.dtype is not None and not np.can_cast(array.dtype, space.dtype, casting="same_kind"):
            raise self.fail(call, f"{path} has dtype {array.dtype}, expected {space.dtype} (the observation space)")

    def check_keys(self, call: str, label: str, mapping: Any, required: set[str], allow_others: bool) -> None:
        if not isinstance(mapping, dict):
            raise self.fail(call, f"{label} is {_describe(mapping)}, expected a dict keyed by agent")
        missing = [a for a in self.env.possible_agents if a in required and a not in mapping]
        if missing:
            raise self.fail(call, f"{label} has no entry for live agent {missing[0]!r} (keys: {sorted(map(str, mapping))})")
        possible = set(self.env.possible_agents)
        unknown = [k for k in mapping if k not in possible]
        if unknown and not allow_others:
            raise self.fail(call, f"{label} has key {unknown[0]!r}, which is not in possible_agents")

    def live_agents(self, call: str) -> list[str]:
        agents = list(getattr(self.env, "agents", []))
        unknown = [a for a in agents if a not in self.env.possible_agents]
        if unknown:
            raise self.fail(call, f"env.agents holds {unknown[0]!r}, which is not in possible_agents")
        return agents

    def reset(self, seed: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            result = self.env.reset(seed=seed)
        except Exception as exc:
            raise self.fail("reset", f"raised {type(exc).__name__}: {exc}") from exc
        if not (isinstance(result, tuple) and len(result) == 2):
            raise self.fail("reset", f"returned {_describe(result)}, expected (obs, infos)")
        obs, infos = result
        live = self.live_agents("reset")
        if not live:
            raise self.fail("reset", "env.agents is empty after reset")
        self.check_keys("reset", "obs", obs, set(live), allow_others=False)
        extra = [a for a in obs if a not in live]
        if extra:
            raise self.fail("reset", f"obs has an entry for {extra[0]!r}, which is not in env.agents {live}")
        self.check_keys("reset", "infos", infos, set(live), allow_others=True)
        for agent in live:
            self.check_obs("reset", self.env.observation_space(agent), obs[agent], f"obs[{agent!r}]")
        return obs, infos

    def step(self, obs: dict[str, Any], infos: dict[str, Any], samplers: dict[str, spaces.Space]) -> bool:
        """One step with sampled actions; True when no agent is left."""
        acting = self.live_agents("step")
        actions = {a: _sample(samplers[a], obs.get(a), infos.get(a)) for a in acting}
        try:
            result = self.env.step(actions)
        except Exception as exc:
            raise self.fail("step", f"raised {type(exc).__name__}: {exc}") from exc
        if not (isinstance(result, tuple) and len(result) == 5):
            count = len(result) if isinstance(result, tuple) else _describe(result)
            raise self.fail("step", f"returned {count} values, expected (obs, rewards, terminations, truncations, infos)")
        new_obs, rewards, terminations, truncations, new_infos = result
        live = self.live_agents("step")
        required = set(acting)
        self.check_keys("step", "obs", new_obs, required | set(live), allow_others=False)
        for label, mapping in (("rewards", rewards), ("terminations", terminations), ("truncations", truncations)):
            self.check_keys("step", label, mapping, required, allow_others=False)
        self.check_keys("step", "infos", new_infos, required, allow_others=True)
        for agent in acting:
            reward = rewards[agent]
            if (isinstance(reward, bool | np.bool_) or not isinstance(reward, int | float | np.number)
                    or not math.isfinite(float(reward))):
                raise self.fail("step", f"rewards[{agent!r}] is {_describe(reward)}, expected a finite number")
            for label, flags in (("terminations", terminations), ("truncations", truncations)):
                if not isinstance(flags[agent], bool | np.bool_):
                    raise self.fail("step", f"{label}[{agent!r}] is {_describe(flags[agent])}, expected a bool")
            if (terminations[agent] or truncations[agent]) and agent in live:
                raise self.fail("step", f"agent {agent!r} terminated or truncated but is still in env.agents")
        for agent in set(acting) | set(live):
            if agent in new_obs:
                self.check_obs("step", self.env.observation_space(agent), new_obs[agent], f"obs[{agent!r}]")
        obs.clear()
        obs.update(new_obs)
        infos.clear()
        infos.update(new_infos)
        return not live


def _sample(space: spaces.Space, obs: Any, info: Any) -> Any:
    mask = None
    if isinstance(obs, dict) and "action_mask" in obs:
        mask = obs["action_mask"]
    elif isinstance(info, dict) and "action_mask" in info:
        mask = info["action_mask"]
    if mask is not None and isinstance(space, spaces.Discrete) and np.any(mask):
        return space.sample(mask=np.asarray(mask, dtype=np.int8))
    return space.sample()


def _check(env: Any, name: str, steps: int, seed: int) -> None:
    checker = _Checker(env, name)
    possible = getattr(env, "possible_agents", None)
    if not possible:
        raise checker.fail("possible_agents", f"is {_describe(possible)}, expected a non-empty list")
    samplers = {}
    for index, agent in enumerate(possible):
        for kind in ("observation_space", "action_space"):
            try:
                space = getattr(env, kind)(agent)
            except Exception as exc:
                raise checker.fail(f"{kind}({agent!r})", f"raised {type(exc).__name__}: {exc}") from exc
            if not isinstance(space, spaces.Space):
                raise checker.fail(f"{kind}({agent!r})", f"returned {_describe(space)}, expected a gymnasium Space")
        samplers[agent] = deepcopy(env.action_space(agent))
        samplers[agent].seed(seed + index)
    obs, infos = checker.reset(seed)
    for _ in range(steps):
        if checker.step(obs, infos, samplers):
            obs, infos = checker.reset(None)


def check_parallel_env(env_fn_or_env: Callable[[], Any] | Any, name: str, steps: int = 8, seed: int = 0) -> None:
    """Reset and step a parallel env with sampled actions, checking every output against the
    Parallel API and the declared spaces; raise ParallelEnvError naming the env, the agent, the
    call and the expected vs actual value.

    A factory is called for a fresh env, closed afterwards; a ready instance is deep-copied
    (checked in place only when it cannot be copied), so the user's env keeps its state.
    """
    with _global_rng_kept():
        env: Any
        if hasattr(env_fn_or_env, "possible_agents"):
            try:
                env = deepcopy(env_fn_or_env)
            except Exception:
                env = env_fn_or_env
            owned = env is not env_fn_or_env
        else:
            env, owned = env_fn_or_env(), True
        try:
            _check(env, name, steps, seed)
        finally:
            if owned:
                env.close()
