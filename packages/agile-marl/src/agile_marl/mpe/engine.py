"""`BatchedMPE`: one scenario over `n` sub-envs — actions in, observations, rewards and episode
ends out. The vector env and the one-sub-env ParallelEnv are thin layers over it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from agile_marl.mpe.actions import ActionDecoder, action_spaces
from agile_marl.mpe.core import BatchedWorld
from agile_marl.mpe.scenario import Scenario


class BatchedMPE:
    """The state and step of `n` sub-envs of `scenario`, each with its own random generator."""

    def __init__(self, scenario: Scenario[Any], n: int) -> None:
        if n < 1:
            raise ValueError(f"a batched MPE needs at least one sub-env, got {n}")
        self.scenario = scenario
        self.layout = scenario.layout
        self.n = n
        self.config = scenario.config
        self.world = BatchedWorld(self.layout, n, scenario.num_goals)
        self.steps = np.zeros(n, dtype=np.int64)
        self.rngs = [np.random.default_rng() for _ in range(n)]
        self.decoder = ActionDecoder(self.layout, self.config.continuous_actions, n)
        self.agents = list(self.layout.agent_names)
        self.reset_rows(np.arange(n))  # like mpe2, a world exists before the first reset
        self.action_spaces = action_spaces(self.layout, self.config.continuous_actions)
        team_obs = scenario.observe(self.world)
        self.observation_spaces: dict[str, spaces.Space] = {}
        for team, obs in zip(scenario.teams, team_obs, strict=True):
            for agent in team:
                self.observation_spaces[self.agents[agent]] = spaces.Box(
                    low=-np.float32(np.inf), high=np.float32(np.inf), shape=(obs.shape[-1],), dtype=np.float32)
        self.observation_spaces = {a: self.observation_spaces[a] for a in self.agents}
        self.obs_buffers = [np.zeros((len(team), n, obs.shape[-1]), dtype=np.float32)
                            for team, obs in zip(scenario.teams, team_obs, strict=True)]
        """Per team ``[team size, n, obs_dim]``: row ``j`` is the observation array of its j-th agent."""

    def agent_obs(self) -> dict[str, np.ndarray]:
        """Views ``[n, obs_dim]`` into `obs_buffers`, by agent (in agent order)."""
        views = {self.agents[agent]: buffer[j] for team, buffer in zip(self.scenario.teams, self.obs_buffers,
                                                                       strict=True)
                 for j, agent in enumerate(team)}
        return {agent: views[agent] for agent in self.agents}

    def reset_rows(self, rows: Sequence[int] | np.ndarray, seeds: Sequence[int | None] | None = None) -> None:
        """New episodes in sub-envs `rows` (sub-env ``rows[k]`` reseeded with ``seeds[k]`` unless None)."""
        rows = np.asarray(rows, dtype=np.intp)
        unit = np.empty((len(rows), self.layout.num_entities, 2))
        goals = np.empty((len(rows), self.scenario.num_goals), dtype=np.int64)
        for k, row in enumerate(rows):
            seed = None if seeds is None else seeds[k]
            if seed is not None:
                self.rngs[row] = np.random.default_rng(seed)
            unit[k], goals[k] = self.scenario.draw(self.rngs[row])
        self.world.reset_rows(rows, unit, goals)
        self.steps[rows] = 0

    def step(self, actions: dict[str, np.ndarray], acting: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Step every sub-env (or only the `acting` ones: the others' actions are ignored and their
        state is to be reset by the caller); return ``(terminated, truncated)`` ``[n]`` bool."""
        u, c = self.decoder.decode(actions, acting)
        self.world.step(u, c)
        self.steps += 1 if acting is None else acting
        truncated = self.steps >= self.config.max_cycles
        terminal = self.scenario.terminal(self.world)
        terminated = np.zeros(self.n, dtype=bool) if terminal is None else terminal & ~truncated
        return terminated, truncated

    def observe(self) -> None:
        """Write every agent's observation into `obs_buffers` (float32, as mpe2's ``observe``)."""
        for buffer, obs in zip(self.obs_buffers, self.scenario.observe(self.world), strict=True):
            np.copyto(buffer, obs.swapaxes(0, 1))

    def rewards(self) -> np.ndarray:
        """``[n, agents]`` float64 rewards of the last step."""
        return self.scenario.blended_rewards(self.world)

    def load(self, row: int, env: Any) -> None:
        """Copy an mpe2 env's state into sub-env `row`: positions, velocities, utterances, landmark
        assignments and the step count (`env`: an mpe2 ParallelEnv or AEC env, or its raw env)."""
        raw = getattr(env, "unwrapped", env)
        world = raw.world
        entities = [*world.agents, *world.landmarks]
        if [a.name for a in world.agents] != self.agents or len(entities) != self.layout.num_entities:
            raise ValueError(f"the mpe2 world has agents {[a.name for a in world.agents]} and "
                             f"{len(entities)} entities; {self.scenario.name} has {self.agents} and "
                             f"{self.layout.num_entities}")
        self.world.pos[row] = [e.state.p_pos for e in entities]
        self.world.vel[row] = [e.state.p_vel for e in entities]
        if self.layout.dim_c:
            self.world.comm[row] = [a.state.c for a in world.agents]
        self.world.goals[row] = self.scenario.goals_of(world)
        self.steps[row] = raw.steps
