"""simple_v3: one agent rewarded by minus its squared distance to one landmark (mpe2's debugging
scenario). Observation ``[self_vel, landmark_rel_pos]``."""

from __future__ import annotations

import numpy as np

from agile_marl.mpe.config import MPEConfig
from agile_marl.mpe.core import AgentKind, BatchedWorld, LandmarkKind, WorldLayout, squared_length
from agile_marl.mpe.creators import creators
from agile_marl.mpe.scenario import Scenario


class Simple(Scenario[MPEConfig]):
    name = "simple_v3"

    def make_layout(self) -> WorldLayout:
        return WorldLayout([AgentKind("agent_0", collide=False, silent=True)], [LandmarkKind(collide=False)])

    def observe(self, world: BatchedWorld) -> list[np.ndarray]:
        pos, vel = world.pos, world.vel
        return [np.concatenate([vel[:, :1], pos[:, 1:] - pos[:, :1]], axis=-1)]

    def rewards(self, world: BatchedWorld) -> np.ndarray:
        return -squared_length(world.pos[:, :1] - world.pos[:, 1:])


parallel_env, vector_env = creators(Simple, __name__)
