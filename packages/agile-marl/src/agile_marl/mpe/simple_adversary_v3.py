"""simple_adversary_v3: N good agents know which of N landmarks is the goal; one adversary does
not. Good agents are rewarded by minus their team's nearest distance to the goal plus the
adversary's distance to it; the adversary by minus its distance.

Observations: good ``[goal_rel_pos, landmark_rel_positions, other_agent_rel_positions]``;
adversary ``[landmark_rel_positions, other_agent_rel_positions]`` (the nearest ones under
``num_*_neighbors``; the goal is always seen).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agile_marl.mpe.config import NeighborsConfig
from agile_marl.mpe.core import AgentKind, BatchedWorld, LandmarkKind, WorldLayout, length
from agile_marl.mpe.creators import creators
from agile_marl.mpe.observe import nearest, others, relative, repeat
from agile_marl.mpe.scenario import Scenario, goal_positions


@dataclass(frozen=True)
class AdversaryConfig(NeighborsConfig):
    N: int = 2


class Adversary(Scenario[AdversaryConfig]):
    name = "simple_adversary_v3"
    config_type = AdversaryConfig
    num_goals = 1
    """The goal landmark (shared by every agent)."""

    def __init__(self, config: AdversaryConfig) -> None:
        super().__init__(config)
        agents = np.arange(config.N + 1)
        self.landmarks_seen = [repeat(team, np.arange(config.N + 1, 2 * config.N + 1)) for team in self.teams]
        self.others_seen = [others(team, agents) for team in self.teams]

    def make_layout(self) -> WorldLayout:
        n = self.config.N
        agents = [AgentKind(name, size=0.15, collide=False, silent=True)
                  for name in ["adversary_0", *(f"agent_{i}" for i in range(n))]]
        return WorldLayout(agents, [LandmarkKind(size=0.08, collide=False) for _ in range(n)], dim_c=2)

    def make_teams(self) -> list[list[int]]:
        return [[0], list(range(1, self.config.N + 1))]

    def observe(self, world: BatchedWorld) -> list[np.ndarray]:
        config, result = self.config, []
        for team, landmarks, mates in zip(self.teams, self.landmarks_seen, self.others_seen, strict=True):
            seen = [relative(world, team, nearest(world, team, landmarks, config.num_landmark_neighbors)),
                    relative(world, team, nearest(world, team, mates, config.num_agent_neighbors))]
            if team[0] != 0:  # good agents see the goal
                seen.insert(0, goal_positions(world)[:, None] - world.pos[:, team])
            result.append(np.concatenate(seen, axis=-1))
        return result

    def rewards(self, world: BatchedWorld) -> np.ndarray:
        goal = goal_positions(world)[:, None]
        dist = length(world.pos[:, :self.config.N + 1] - goal)
        adversary = dist[:, 0]
        good = -dist[:, 1:].min(axis=-1) + adversary
        return np.concatenate([-adversary[:, None], np.repeat(good[:, None], self.config.N, axis=1)], axis=1)

    def goals_of(self, world: Any) -> list[int]:
        return [world.landmarks.index(world.agents[0].goal_a)]


parallel_env, vector_env = creators(Adversary, __name__)
