"""Stepping a list of parallel envs into preallocated arrays (the engine of both vector envs).

`SubEnvBatch` owns some sub-envs and writes each call's results into a `VecOutputs`; the sync
vector env uses one batch for all sub-envs, the subprocess one a batch per worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from agile_marl.envs.spaces import (
    Batched,
    assign_rows,
    check_action_space,
    copy_batched,
    env_action,
    mask_row,
    mask_shape,
    obs_buffer,
    write_row,
    zero_row,
)


class SubEnvError(RuntimeError):
    """A sub-environment that raised during reset or step (the message names the sub-env)."""


@dataclass
class VecOutputs:
    """The arrays of one reset / step of `n` sub-envs (see the vector env's documentation)."""

    obs: dict[str, Batched]
    rewards: dict[str, np.ndarray]
    terminations: dict[str, np.ndarray]
    truncations: dict[str, np.ndarray]
    alive: dict[str, np.ndarray]
    valid: dict[str, np.ndarray]
    autoreset: np.ndarray
    episode_over: np.ndarray
    action_mask: dict[str, np.ndarray]
    masked: set[str] = field(default_factory=set)
    """Agents for which the env has given an action mask (their masks are reported)."""
    infos: list[Any] = field(default_factory=list)

    @classmethod
    def allocate(cls, observation_spaces: dict[str, spaces.Space], action_spaces: dict[str, spaces.Space],
                 n: int) -> VecOutputs:
        """Zeroed arrays for `n` sub-envs (all-True action masks)."""
        agents = list(observation_spaces)
        masks = {a: np.ones((n, *shape), dtype=bool) for a in agents
                 if (shape := mask_shape(action_spaces[a])) is not None}
        return cls(
            obs={a: obs_buffer(observation_spaces[a], n) for a in agents},
            rewards={a: np.zeros(n, dtype=np.float32) for a in agents},
            terminations={a: np.zeros(n, dtype=bool) for a in agents},
            truncations={a: np.zeros(n, dtype=bool) for a in agents},
            alive={a: np.zeros(n, dtype=bool) for a in agents},
            valid={a: np.zeros(n, dtype=bool) for a in agents},
            autoreset=np.zeros(n, dtype=bool),
            episode_over=np.zeros(n, dtype=bool),
            action_mask=masks,
            infos=[{} for _ in range(n)],
        )

    def assign(self, rows: slice, other: VecOutputs) -> None:
        """Copy `other` (the outputs of a chunk of sub-envs) into rows `rows`."""
        for agent, buffer in self.obs.items():
            assign_rows(buffer, rows, other.obs[agent])
        for mine, theirs in ((self.rewards, other.rewards), (self.terminations, other.terminations),
                             (self.truncations, other.truncations), (self.alive, other.alive),
                             (self.valid, other.valid), (self.action_mask, other.action_mask)):
            for agent, array in mine.items():
                array[rows] = theirs[agent]
        self.autoreset[rows] = other.autoreset
        self.episode_over[rows] = other.episode_over
        self.masked |= other.masked
        self.infos[rows] = other.infos

    def result(self, copy: bool, step: bool) -> tuple[Any, ...]:
        """``(obs, info)`` after a reset, ``(obs, rewards, terminations, truncations, info)`` after a step."""
        def out(array: Any) -> Any:
            return copy_batched(array) if copy else array

        info: dict[str, Any] = {"alive": {a: out(v) for a, v in self.alive.items()}}
        if step:
            info["valid"] = {a: out(v) for a, v in self.valid.items()}
            info["autoreset"] = out(self.autoreset)
            info["episode_over"] = out(self.episode_over)
        if self.masked:
            info["action_mask"] = {a: out(self.action_mask[a]) for a in self.action_mask if a in self.masked}
        info["infos"] = list(self.infos)
        obs = {a: out(v) for a, v in self.obs.items()}
        if not step:
            return obs, info
        return (obs, {a: out(v) for a, v in self.rewards.items()},
                {a: out(v) for a, v in self.terminations.items()},
                {a: out(v) for a, v in self.truncations.items()}, info)


def env_spaces(env: Any) -> tuple[list[str], dict[str, spaces.Space], dict[str, spaces.Space]]:
    """``possible_agents`` and the observation and action spaces of one parallel env."""
    agents = list(env.possible_agents)
    if not agents:
        raise ValueError(f"{type(env).__name__}.possible_agents is empty")
    obs_spaces = {a: env.observation_space(a) for a in agents}
    action_spaces = {a: env.action_space(a) for a in agents}
    for agent, space in action_spaces.items():
        check_action_space(space, agent)
    return agents, obs_spaces, action_spaces


class SubEnvBatch:
    """Sub-envs ``first_index ...`` stepped one after another with next-step autoreset."""

    def __init__(self, envs: list[Any], first_index: int = 0) -> None:
        if not envs:
            raise ValueError("a vector env needs at least one sub-env")
        self.envs = envs
        self.first_index = first_index
        self.agents, self.observation_spaces, self.action_spaces = env_spaces(envs[0])
        for index, env in enumerate(envs[1:], start=1):
            agents, obs_spaces, action_spaces = env_spaces(env)
            if (agents, obs_spaces, action_spaces) != (self.agents, self.observation_spaces, self.action_spaces):
                raise ValueError(f"sub-env {first_index + index} has other agents or spaces than sub-env "
                                 f"{first_index}: {agents} vs {self.agents}")
        n = len(envs)
        self.out = VecOutputs.allocate(self.observation_spaces, self.action_spaces, n)
        self.finished = {a: np.zeros(n, dtype=bool) for a in self.agents}
        self.needs_reset = np.zeros(n, dtype=bool)
        self._mask_in_obs = {a: isinstance(s, spaces.Dict) and "action_mask" in s.spaces
                             for a, s in self.observation_spaces.items()}

    def _fail(self, call: str, row: int, exc: Exception) -> SubEnvError:
        return SubEnvError(f"sub-env {self.first_index + row}: {call}() raised {type(exc).__name__}: {exc}")

    def reset(self, seeds: list[int | None], options: dict[str, Any] | None = None) -> VecOutputs:
        """Reset every sub-env (sub-env ``k`` of this batch with ``seeds[k]``)."""
        out = self.out
        for row, env in enumerate(self.envs):
            try:
                obs, infos = env.reset(seed=seeds[row], options=options)
            except Exception as exc:
                raise self._fail("reset", row, exc) from exc
            self._reset_row(row, env, obs, infos)
        for arrays in (out.rewards, out.terminations, out.truncations, out.valid):
            for array in arrays.values():
                array[:] = 0
        out.autoreset[:] = False
        out.episode_over[:] = False
        self.needs_reset[:] = False
        return out

    def step(self, actions: dict[str, np.ndarray]) -> VecOutputs:
        """Step every sub-env with its row of `actions` (``[n, *shape]`` per agent); sub-envs whose
        episode ended at the previous step are reset instead."""
        for row, env in enumerate(self.envs):
            if self.needs_reset[row]:
                try:
                    obs, infos = env.reset()
                except Exception as exc:
                    raise self._fail("reset", row, exc) from exc
                self._reset_row(row, env, obs, infos)
                self._clear_step(row)
                self.out.autoreset[row] = True
                self.needs_reset[row] = False
            else:
                self._step_row(row, env, actions)
        return self.out

    def _clear_step(self, row: int) -> None:
        out = self.out
        for agent in self.agents:
            out.rewards[agent][row] = 0.0
            out.terminations[agent][row] = False
            out.truncations[agent][row] = False
            out.valid[agent][row] = False
        out.episode_over[row] = False

    def _reset_row(self, row: int, env: Any, obs: dict[str, Any], infos: dict[str, Any]) -> None:
        out = self.out
        live = set(env.agents)
        for agent in self.agents:
            alive = agent in live and agent in obs
            out.alive[agent][row] = alive
            self.finished[agent][row] = False
            if alive:
                write_row(out.obs[agent], row, obs[agent])
            else:
                zero_row(out.obs[agent], row)
        self._masks(row, obs, infos)
        out.infos[row] = infos

    def _step_row(self, row: int, env: Any, actions: dict[str, np.ndarray]) -> None:
        out = self.out
        acting = [a for a in self.agents if out.alive[a][row]]
        env_actions = {a: env_action(self.action_spaces[a], actions[a][row]) for a in acting}
        try:
            obs, rewards, terminations, truncations, infos = env.step(env_actions)
        except Exception as exc:
            raise self._fail("step", row, exc) from exc
        live = set(env.agents)
        any_alive = False
        for agent in self.agents:
            was_alive = bool(out.alive[agent][row])
            out.valid[agent][row] = was_alive
            if was_alive:
                terminated = bool(terminations.get(agent, False))
                truncated = bool(truncations.get(agent, False))
                out.rewards[agent][row] = rewards.get(agent, 0.0)
                out.terminations[agent][row] = terminated
                out.truncations[agent][row] = truncated
                if terminated or truncated:
                    self.finished[agent][row] = True
            else:
                out.rewards[agent][row] = 0.0
                out.terminations[agent][row] = False
                out.truncations[agent][row] = False
            alive = agent in live and not self.finished[agent][row]
            out.alive[agent][row] = alive
            any_alive = any_alive or alive
            if (was_alive or alive) and agent in obs:
                write_row(out.obs[agent], row, obs[agent])
            else:
                zero_row(out.obs[agent], row)
        out.autoreset[row] = False
        out.episode_over[row] = not any_alive
        self.needs_reset[row] = not any_alive
        self._masks(row, obs, infos)
        out.infos[row] = infos

    def _masks(self, row: int, obs: dict[str, Any], infos: dict[str, Any]) -> None:
        out = self.out
        for agent, masks in out.action_mask.items():
            mask = None
            if out.alive[agent][row]:
                if self._mask_in_obs[agent]:
                    mask = obs[agent]["action_mask"]
                else:
                    info = infos.get(agent)
                    if isinstance(info, dict):
                        mask = info.get("action_mask")
            if mask is None:
                masks[row] = True
            else:
                masks[row] = mask_row(mask)
                out.masked.add(agent)

    def close(self) -> None:
        """Close every sub-env."""
        for env in self.envs:
            env.close()
