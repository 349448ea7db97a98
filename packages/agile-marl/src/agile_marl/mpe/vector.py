"""`MPEVecEnv`: the batched MPE as a multi-agent vector env (the layout of `PettingZooVecEnv`).

All sub-envs step as arrays in this process. MPE agents never leave before their episode ends,
so every agent is alive until the step that ends its sub-env's episode (all of them together),
and the next step autoresets that sub-env (Gymnasium's next-step autoreset, as in
`agile_marl.envs.vector`). ``info["infos"]`` holds mpe2's empty per-agent info dicts: new ones
at each reset of a sub-env, the same ones at its other steps.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from agile_marl.envs.vector import MultiAgentVecEnv
from agile_marl.mpe.engine import BatchedMPE
from agile_marl.mpe.parallel import MPEParallelEnv
from agile_marl.mpe.scenario import Scenario


class MPEVecEnv(MultiAgentVecEnv):
    """`num_envs` sub-envs of one batched MPE scenario.

    Args:
        scenario: the scenario and its configuration.
        num_envs: number of sub-envs.
        copy: return fresh arrays from each call (True) or the internal buffers (False).
        seed: seeds the action spaces now and is the seed of the first ``reset()`` without one.
    """

    def __init__(self, scenario: Scenario[Any], num_envs: int, copy: bool = True, seed: int | None = None) -> None:
        self.scenario = scenario
        self.engine = BatchedMPE(scenario, num_envs)
        engine = self.engine
        factory = functools.partial(MPEParallelEnv, scenario)
        super().__init__([factory] * num_envs, engine.agents, engine.observation_spaces, engine.action_spaces,
                         copy=copy, seed=seed)
        agents = len(engine.agents)
        # per-agent outputs are rows of [agents, n] arrays, so one op writes every agent
        self._rewards = np.zeros((agents, num_envs), dtype=np.float32)
        self._flags = {name: np.zeros((agents, num_envs), dtype=bool)
                       for name in ("terminations", "truncations", "alive", "valid")}
        out = self._out
        out.obs = engine.agent_obs()
        out.rewards = dict(zip(engine.agents, self._rewards, strict=True))
        for name, flags in self._flags.items():
            setattr(out, name, dict(zip(engine.agents, flags, strict=True)))
        self._needs_reset = np.zeros(num_envs, dtype=bool)

    def _fresh_infos(self) -> dict[str, Any]:
        return {agent: {} for agent in self.agents}

    def _reset(self, seeds: list[int | None], options: dict[str, Any] | None) -> None:
        engine = self.engine
        engine.reset_rows(range(self.num_envs), seeds)
        engine.observe()
        self._rewards[...] = 0.0
        for name, flags in self._flags.items():
            flags[...] = name == "alive"
        out = self._out
        out.autoreset[...] = False
        out.episode_over[...] = False
        out.infos[:] = [self._fresh_infos() for _ in range(self.num_envs)]
        self._needs_reset[...] = False

    def _step(self, actions: dict[str, np.ndarray]) -> None:
        engine, out = self.engine, self._out
        resetting = self._needs_reset
        restart = np.flatnonzero(resetting)
        acting = ~resetting if len(restart) else None
        terminated, truncated = engine.step(actions, acting)
        rewards = engine.rewards()
        if acting is not None:
            engine.reset_rows(restart)
            terminated &= acting
            truncated &= acting
            rewards[restart] = 0.0
            for row in restart:
                out.infos[row] = self._fresh_infos()
        engine.observe()
        over = terminated | truncated
        self._rewards[...] = rewards.T
        flags = self._flags
        flags["terminations"][...] = terminated
        flags["truncations"][...] = truncated
        flags["alive"][...] = ~over
        flags["valid"][...] = ~resetting
        out.autoreset[...] = resetting
        out.episode_over[...] = over
        self._needs_reset = over

    def inject_state(self, row: int, env: Any) -> None:
        """Put an mpe2 env's current state (``env.unwrapped.world`` and its step count) into sub-env
        `row`, a live episode from the next step on (its outputs update at that step)."""
        self.engine.load(row, env)
        self._needs_reset[row] = False
        for agent in self.agents:
            self._out.alive[agent][row] = True

    def widened(self, copies: int) -> MPEVecEnv:
        if copies < 1:
            raise ValueError(f"copies must be >= 1, got {copies}")
        return MPEVecEnv(self.scenario, self.num_envs * copies, copy=self.copy)

    def close(self) -> None:
        self.closed = True
