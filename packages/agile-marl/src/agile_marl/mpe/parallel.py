"""`MPEParallelEnv`: one sub-env of the batched MPE as a PettingZoo ParallelEnv (mpe2's API)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from agile_marl.mpe.engine import BatchedMPE
from agile_marl.mpe.scenario import Scenario


class MPEParallelEnv(ParallelEnv):
    """A batched MPE scenario with one sub-env, behaving like mpe2's ``parallel_env``: every agent
    leaves at the step that ends the episode (``agents`` is empty until the next reset)."""

    metadata: dict[str, Any] = {"render_modes": [], "is_parallelizable": True, "render_fps": 10}  # noqa: RUF012

    def __init__(self, scenario: Scenario[Any]) -> None:
        self.scenario = scenario
        self.engine = BatchedMPE(scenario, 1)
        self.metadata = {**type(self).metadata, "name": scenario.name}
        self.render_mode = None
        self.possible_agents = list(self.engine.agents)
        self.agents = list(self.possible_agents)
        self.observation_spaces = dict(self.engine.observation_spaces)
        self.action_spaces = dict(self.engine.action_spaces)
        self.state_space = spaces.Box(low=-np.float32(np.inf), high=np.float32(np.inf), dtype=np.float32,
                                      shape=(sum(b.shape[0] * b.shape[2] for b in self.engine.obs_buffers),))
        self._obs = self.engine.agent_obs()
        self.engine.observe()

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.engine.reset_rows([0], [seed])
        self.engine.observe()
        self.agents = list(self.possible_agents)
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        if not self.agents:
            return {}, {}, {}, {}, {}
        rows = {agent: np.asarray(actions[agent])[None] for agent in self.agents}
        terminated, truncated = self.engine.step(rows)
        rewards = self.engine.rewards()[0]
        self.engine.observe()
        obs = self._observations()
        names = list(self.agents)
        if terminated[0] or truncated[0]:
            self.agents = []
        return (obs, {agent: float(rewards[i]) for i, agent in enumerate(names)},
                {agent: bool(terminated[0]) for agent in names}, {agent: bool(truncated[0]) for agent in names},
                {agent: {} for agent in names})

    def _observations(self) -> dict[str, np.ndarray]:
        return {agent: self._obs[agent][0].copy() for agent in self.possible_agents}

    def state(self) -> np.ndarray:
        """All agents' observations concatenated (mpe2's ``state()``)."""
        return np.concatenate([self._obs[agent][0] for agent in self.possible_agents])

    def inject_state(self, env: Any) -> None:
        """Put an mpe2 env's current state into this env (its outputs update at the next step)."""
        self.engine.load(0, env)
        self.agents = list(self.possible_agents)

    def render(self) -> None:
        """Nothing to render (the batched MPE supports only ``render_mode=None``)."""
        return None

    def close(self) -> None:
        """Nothing to release."""
