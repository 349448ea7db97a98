"""simple_tag_v3: slower adversaries chase faster good agents among obstacles. Adversaries share
+10 per (adversary, good agent) contact; a good agent gets -10 per adversary touching it and a
penalty for leaving ``[-0.9, 0.9]^2``.

Observation ``[self_vel, self_pos, obstacle_rel_positions, other_agent_rel_positions,
good_agent_velocities]`` (the nearest ones under ``num_*_neighbors``, zeros for adversaries'
velocities and padded slots).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agile_marl.mpe.config import NeighborsConfig, check_no_curriculum
from agile_marl.mpe.core import AgentKind, BatchedWorld, LandmarkKind, WorldLayout
from agile_marl.mpe.creators import creators
from agile_marl.mpe.observe import gather, nearest, others, relative, repeat, touching
from agile_marl.mpe.scenario import Scenario


@dataclass(frozen=True)
class TagConfig(NeighborsConfig):
    num_good: int = 1
    num_adversaries: int = 3
    num_obstacles: int = 2
    curriculum: bool = False
    terminate_on_success: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_no_curriculum(self.curriculum)


def boundary_penalty(x: np.ndarray) -> np.ndarray:
    """mpe2's ``bound(|coordinate|)``: 0 below 0.9, linear to 1 at 1, then ``exp(2x - 2)`` capped at 10."""
    outside = np.minimum(np.exp(np.minimum(2 * x - 2, 3.0)), 10)  # exp(3) > 10: the cap, without overflow
    return np.where(x < 0.9, 0.0, np.where(x < 1.0, (x - 0.9) * 10, outside))


class Tag(Scenario[TagConfig]):
    name = "simple_tag_v3"
    config_type = TagConfig

    def __init__(self, config: TagConfig) -> None:
        super().__init__(config)
        agents = np.arange(config.num_adversaries + config.num_good)
        self.adversaries, self.good = self.teams
        self.is_good = np.zeros(self.layout.num_entities, dtype=bool)
        self.is_good[self.good] = True
        obstacles = np.arange(len(agents), len(agents) + config.num_obstacles)
        self.obstacles_seen = [repeat(team, obstacles) for team in self.teams]
        self.others_seen = [others(team, agents) for team in self.teams]
        self.good_seen = [others(team, self.good) for team in self.teams]

    def make_layout(self) -> WorldLayout:
        config = self.config
        adversaries = [AgentKind(f"adversary_{i}", size=0.075, silent=True, accel=3.0, max_speed=1.0)
                       for i in range(config.num_adversaries)]
        good = [AgentKind(f"agent_{i}", size=0.05, silent=True, accel=4.0, max_speed=1.3)
                for i in range(config.num_good)]
        obstacles = [LandmarkKind(size=0.2, spawn=0.9) for _ in range(config.num_obstacles)]
        return WorldLayout([*adversaries, *good], obstacles, dim_c=2)

    def make_teams(self) -> list[list[int]]:
        adversaries = self.config.num_adversaries
        return [list(range(adversaries)), list(range(adversaries, adversaries + self.config.num_good))]

    def observe(self, world: BatchedWorld) -> list[np.ndarray]:
        config, result = self.config, []
        for team, obstacles, mates, good in zip(self.teams, self.obstacles_seen, self.others_seen, self.good_seen,
                                                strict=True):
            if config.num_agent_neighbors is None:
                velocities = gather(world.vel, good)
            else:
                mates = nearest(world, team, mates, config.num_agent_neighbors)
                velocities = gather(world.vel, mates, where=self.is_good)
            obstacles = nearest(world, team, obstacles, config.num_landmark_neighbors)
            result.append(np.concatenate([world.vel[:, team], world.pos[:, team], relative(world, team, obstacles),
                                          relative(world, team, mates), velocities], axis=-1))
        return result

    def _caught(self, world: BatchedWorld) -> np.ndarray:
        """``[n, adversaries, good]`` bool: the adversary touches the good agent."""
        return touching(world, self.adversaries, self.good)

    def rewards(self, world: BatchedWorld) -> np.ndarray:
        caught = self._caught(world)
        good = -10.0 * caught.sum(axis=1)
        penalty = boundary_penalty(np.abs(world.pos[:, self.good]))
        good = good - penalty[..., 0] - penalty[..., 1]
        adversary = 10.0 * caught.sum(axis=(1, 2))
        return np.concatenate([np.repeat(adversary[:, None], len(self.adversaries), axis=1), good], axis=1)

    def terminal(self, world: BatchedWorld) -> np.ndarray | None:
        if not self.config.terminate_on_success:
            return None
        return np.asarray(self._caught(world).any(axis=1).all(axis=-1))


parallel_env, vector_env = creators(Tag, __name__)
