"""simple_spread_v3: N agents cover N landmarks. Globally rewarded by minus the sum over landmarks
of the nearest agent's distance, locally by -1 per other agent touched (blended by
``local_ratio``). Observation ``[self_vel, self_pos, landmark_rel_positions,
other_agent_rel_positions, other_agent_comms]`` (the nearest ones under ``num_*_neighbors``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agile_marl.mpe.config import NeighborsConfig, check_no_curriculum, check_ratio
from agile_marl.mpe.core import AgentKind, BatchedWorld, LandmarkKind, WorldLayout
from agile_marl.mpe.creators import creators
from agile_marl.mpe.observe import distances, gather, nearest, others, relative, repeat, touching
from agile_marl.mpe.scenario import Scenario

CAPTURE_RADIUS = 0.1
"""A landmark is covered when an agent is this close (``terminate_on_success``)."""


@dataclass(frozen=True)
class SpreadConfig(NeighborsConfig):
    N: int = 3
    local_ratio: float = 0.5
    curriculum: bool = False
    terminate_on_success: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ratio(self.local_ratio)
        check_no_curriculum(self.curriculum)


class Spread(Scenario[SpreadConfig]):
    name = "simple_spread_v3"
    config_type = SpreadConfig

    def __init__(self, config: SpreadConfig) -> None:
        super().__init__(config)
        self.local_ratio = config.local_ratio
        agents = np.arange(config.N)
        self.agent_index = agents
        self.landmark_index = np.arange(config.N, 2 * config.N)
        self.landmarks_seen = repeat(agents, self.landmark_index)
        self.others_seen = others(agents, agents)

    def make_layout(self) -> WorldLayout:
        n = self.config.N
        agents = [AgentKind(f"agent_{i}", size=0.15, silent=True) for i in range(n)]
        return WorldLayout(agents, [LandmarkKind(collide=False) for _ in range(n)], dim_c=2)

    def observe(self, world: BatchedWorld) -> list[np.ndarray]:
        team, config = self.agent_index, self.config
        landmarks = nearest(world, team, self.landmarks_seen, config.num_landmark_neighbors)
        mates = nearest(world, team, self.others_seen, config.num_agent_neighbors)
        return [np.concatenate([world.vel[:, team], world.pos[:, team], relative(world, team, landmarks),
                                relative(world, team, mates), gather(world.comm, mates)], axis=-1)]

    def rewards(self, world: BatchedWorld) -> np.ndarray:
        team = self.agent_index
        hits = touching(world, team, team)
        hits[:, team, team] = False
        return -np.asarray(hits.sum(axis=-1), dtype=np.float64)

    def _nearest_agent(self, world: BatchedWorld) -> np.ndarray:
        """``[n, landmarks]``: each landmark's distance to its nearest agent."""
        return distances(world, self.landmark_index, self.agent_index).min(axis=-1)

    def global_reward(self, world: BatchedWorld) -> np.ndarray:
        return -np.asarray(self._nearest_agent(world).sum(axis=-1))

    def terminal(self, world: BatchedWorld) -> np.ndarray | None:
        if not self.config.terminate_on_success:
            return None
        return np.asarray((self._nearest_agent(world) < CAPTURE_RADIUS).all(axis=-1))


parallel_env, vector_env = creators(Spread, __name__)
