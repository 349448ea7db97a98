"""simple_push_v3: a good agent reaches its goal landmark while an adversary, which does not know
the goal, pushes it away. Good agent rewarded by minus its distance to the goal; adversary by
the good agent's distance minus its own.

Observations: good ``[self_vel, goal_rel_pos, own_color, landmark_rel_positions,
landmark_colors, adversary_rel_pos]``; adversary ``[self_vel, landmark_rel_positions,
agent_rel_pos]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agile_marl.mpe.config import MPEConfig
from agile_marl.mpe.core import AgentKind, BatchedWorld, LandmarkKind, WorldLayout, length
from agile_marl.mpe.creators import creators
from agile_marl.mpe.scenario import Scenario, goal_positions


def _tinted(base: float, tint: float, channel: int) -> np.ndarray:
    color = np.full(3, base)
    color[channel] += tint
    return color


LANDMARK_COLORS = np.stack([_tinted(0.1, 0.8, i + 1) for i in range(2)])
GOOD_COLORS = np.stack([_tinted(0.25, 0.5, goal + 1) for goal in range(2)])
"""The good agent's color, by goal landmark (it observes it)."""


class Push(Scenario[MPEConfig]):
    name = "simple_push_v3"
    num_goals = 1

    def make_layout(self) -> WorldLayout:
        agents = [AgentKind("adversary_0", silent=True), AgentKind("agent_0", silent=True)]
        return WorldLayout(agents, [LandmarkKind(collide=False) for _ in range(2)], dim_c=2)

    def make_teams(self) -> list[list[int]]:
        return [[0], [1]]

    def observe(self, world: BatchedWorld) -> list[np.ndarray]:
        pos, vel, n = world.pos, world.vel, world.n
        landmarks = (pos[:, None, 2:] - pos[:, :2, None]).reshape(n, 2, -1)  # [n, agent, 4]
        adversary = np.concatenate([vel[:, 0], landmarks[:, 0], pos[:, 1] - pos[:, 0]], axis=-1)
        good = np.concatenate([vel[:, 1], goal_positions(world) - pos[:, 1], GOOD_COLORS[world.goals[:, 0]],
                               landmarks[:, 1], np.broadcast_to(LANDMARK_COLORS.reshape(-1), (n, 6)),
                               pos[:, 0] - pos[:, 1]], axis=-1)
        return [adversary[:, None], good[:, None]]

    def rewards(self, world: BatchedWorld) -> np.ndarray:
        dist = length(world.pos[:, :2] - goal_positions(world)[:, None])
        return np.stack([dist[:, 1] - dist[:, 0], -dist[:, 1]], axis=1)

    def goals_of(self, world: Any) -> list[int]:
        return [world.landmarks.index(world.agents[0].goal_a)]


parallel_env, vector_env = creators(Push, __name__)
