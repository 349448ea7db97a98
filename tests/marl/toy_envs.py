"""Tiny deterministic PettingZoo Parallel envs for the multi-agent tests (importable by every
marl test: ``from tests.marl.toy_envs import ToyHeteroEnv``).

`ToyHeteroEnv` has heterogeneous spaces and agents that leave at different steps:

* ``a_0``: obs Box(3,) ``[t, noise, episode]``, action Discrete(2); terminates after
  ``a_steps`` (2) steps; reward ``t + action``.
* ``b_0``: obs Box(5,) ``[t, noise, episode, last a_0 action, last b_0 action[0]]``, action
  Box(-1, 1, (2,)); terminates (or truncates with ``b_truncates``) after ``b_steps`` (4) steps;
  reward ``10 t + action[0]``.

``t`` counts the steps of the episode (1 after the first step), ``noise`` is drawn from the
env's RNG at each reset and step (so seeding is observable), ``episode`` counts resets.
With ``masks="info"`` (or ``"obs"``) ``a_0`` gets an action mask ``[1, t % 2 == 0]`` in its
info (or as a Dict observation ``{"observation", "action_mask"}``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class ToyHeteroEnv(ParallelEnv):
    """Two agents with different spaces and episode lengths; exact, known rewards."""

    metadata: ClassVar[dict[str, Any]] = {"name": "toy_hetero_v0", "render_modes": []}

    def __init__(self, a_steps: int = 2, b_steps: int = 4, b_truncates: bool = False,
                 masks: str | None = None) -> None:
        self.a_steps, self.b_steps, self.b_truncates, self.masks = a_steps, b_steps, b_truncates, masks
        self.possible_agents = ["a_0", "b_0"]
        self.agents: list[str] = []
        a_obs: spaces.Space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
        if masks == "obs":
            a_obs = spaces.Dict({"observation": a_obs, "action_mask": spaces.Box(0, 1, (2,), np.int8)})
        self.observation_spaces = {"a_0": a_obs, "b_0": spaces.Box(-np.inf, np.inf, (5,), np.float32)}
        self.action_spaces = {"a_0": spaces.Discrete(2), "b_0": spaces.Box(-1.0, 1.0, (2,), np.float32)}
        self.np_random = np.random.default_rng()
        self.t = 0
        self.episode = 0
        self.noise = 0.0
        self.last_a = 0.0
        self.last_b = 0.0

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def _mask(self) -> np.ndarray:
        return np.array([1, self.t % 2 == 0], dtype=np.int8)

    def _obs(self, agent: str) -> Any:
        if agent == "a_0":
            obs = np.array([self.t, self.noise, self.episode], dtype=np.float32)
            if self.masks == "obs":
                return {"observation": obs, "action_mask": self._mask()}
            return obs
        return np.array([self.t, self.noise, self.episode, self.last_a, self.last_b], dtype=np.float32)

    def _infos(self, agents: list[str]) -> dict[str, dict[str, Any]]:
        infos: dict[str, dict[str, Any]] = {a: {"t": self.t} for a in agents}
        if self.masks == "info" and "a_0" in infos:
            infos["a_0"]["action_mask"] = self._mask()
        return infos

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        self.episode += 1
        self.noise = float(self.np_random.uniform())
        self.last_a = self.last_b = 0.0
        return {a: self._obs(a) for a in self.agents}, self._infos(self.agents)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        acting = list(self.agents)
        self.t += 1
        self.noise = float(self.np_random.uniform())
        rewards: dict[str, float] = {}
        terminations: dict[str, bool] = {}
        truncations: dict[str, bool] = {}
        if "a_0" in acting:
            self.last_a = float(int(actions["a_0"]))
            rewards["a_0"] = float(self.t + int(actions["a_0"]))
            terminations["a_0"] = self.t >= self.a_steps
            truncations["a_0"] = False
        if "b_0" in acting:
            self.last_b = float(np.asarray(actions["b_0"])[0])
            rewards["b_0"] = 10.0 * self.t + self.last_b
            ended = self.t >= self.b_steps
            terminations["b_0"] = ended and not self.b_truncates
            truncations["b_0"] = ended and self.b_truncates
        obs = {a: self._obs(a) for a in acting}
        infos = self._infos(acting)
        self.agents = [a for a in acting if not (terminations[a] or truncations[a])]
        return obs, rewards, terminations, truncations, infos


def toy_hetero_env(**kwargs: Any) -> ToyHeteroEnv:
    """A factory function (the `entrypoint` form)."""
    return ToyHeteroEnv(**kwargs)


def parallel_env(**kwargs: Any) -> ToyHeteroEnv:
    """So that this module works as `environment.name: tests.marl.toy_envs`."""
    return ToyHeteroEnv(**kwargs)


# ------------------------------------------------------------------ broken envs for the checks
class BrokenRewardEnv(ToyHeteroEnv):
    """``b_0``'s reward is a string."""

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminations, truncations, infos = super().step(actions)
        rewards["b_0"] = "x"
        return obs, rewards, terminations, truncations, infos


class WrongObsShapeEnv(ToyHeteroEnv):
    """``a_0``'s observation has 4 entries instead of 3."""

    def _obs(self, agent: str) -> Any:
        obs = super()._obs(agent)
        return np.zeros(4, dtype=np.float32) if agent == "a_0" else obs


class MissingRewardEnv(ToyHeteroEnv):
    """``step`` gives no reward for ``b_0``."""

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminations, truncations, infos = super().step(actions)
        rewards.pop("b_0", None)
        return obs, rewards, terminations, truncations, infos


class RaisingEnv(ToyHeteroEnv):
    """Raises in its ``fail_after``-th call of ``step`` (counted over all episodes)."""

    def __init__(self, fail_after: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_after = fail_after
        self.calls = 0

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.calls += 1
        if self.calls >= self.fail_after:
            raise RuntimeError(f"toy failure at step call {self.calls}")
        return super().step(actions)


class RewardScale:
    """A parallel-env wrapper multiplying every reward by ``scale`` (for the spec's `wrappers`)."""

    def __init__(self, env: Any, scale: float = 1.0) -> None:
        self.env = env
        self.scale = scale

    def __getattr__(self, name: str) -> Any:
        if name == "env" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        return obs, {a: r * self.scale for a, r in rewards.items()}, terminations, truncations, infos
