"""simple_reference_v3: two agents, each knowing the landmark the *other* must reach, move and talk
(10 words). Each is rewarded by minus the other's distance to the landmark it knows, blended with
the mean of both by ``local_ratio``. Observation ``[self_vel, landmark_rel_positions,
known_landmark_color, other_agent_utterance]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agile_marl.mpe.config import MPEConfig, check_ratio
from agile_marl.mpe.core import AgentKind, BatchedWorld, LandmarkKind, WorldLayout, length
from agile_marl.mpe.creators import creators
from agile_marl.mpe.observe import gather, others, relative, repeat
from agile_marl.mpe.scenario import Scenario

LANDMARK_COLORS = np.array([[0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.25, 0.25, 0.75]])


@dataclass(frozen=True)
class ReferenceConfig(MPEConfig):
    local_ratio: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ratio(self.local_ratio)


class Reference(Scenario[ReferenceConfig]):
    name = "simple_reference_v3"
    config_type = ReferenceConfig
    num_goals = 2
    """Column i: the landmark agent i knows (the other agent's target)."""

    def __init__(self, config: ReferenceConfig) -> None:
        super().__init__(config)
        self.local_ratio = config.local_ratio
        self.team = np.arange(2)
        self.landmarks_seen = repeat(self.team, np.arange(2, 5))
        self.other = others(self.team, self.team)

    def make_layout(self) -> WorldLayout:
        agents = [AgentKind(f"agent_{i}", collide=False) for i in range(2)]
        return WorldLayout(agents, [LandmarkKind(collide=False) for _ in range(3)], dim_c=10)

    def observe(self, world: BatchedWorld) -> list[np.ndarray]:
        team = self.team
        return [np.concatenate([world.vel[:, team], relative(world, team, self.landmarks_seen),
                                LANDMARK_COLORS[world.goals], gather(world.comm, self.other)], axis=-1)]

    def rewards(self, world: BatchedWorld) -> np.ndarray:
        targets = world.pos[np.arange(world.n)[:, None], 2 + world.goals]
        return -length(world.pos[:, [1, 0]] - targets)

    def global_reward(self, world: BatchedWorld) -> np.ndarray:
        own = self.rewards(world)
        return (own[:, 0] + own[:, 1]) / 2

    def goals_of(self, world: Any) -> list[int]:
        return [world.landmarks.index(agent.goal_b) for agent in world.agents]


parallel_env, vector_env = creators(Reference, __name__)
