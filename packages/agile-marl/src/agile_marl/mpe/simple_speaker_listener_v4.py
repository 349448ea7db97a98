"""simple_speaker_listener_v4: a speaker that cannot move names one of 3 landmarks to a silent
listener; both are rewarded by minus the listener's squared distance to it.

Observations: speaker ``[goal_landmark_color]``; listener ``[self_vel, landmark_rel_positions,
speaker_utterance]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agile_marl.mpe.config import MPEConfig
from agile_marl.mpe.core import AgentKind, BatchedWorld, LandmarkKind, WorldLayout, squared_length
from agile_marl.mpe.creators import creators
from agile_marl.mpe.scenario import Scenario

LANDMARK_COLORS = np.array([[0.65, 0.15, 0.15], [0.15, 0.65, 0.15], [0.15, 0.15, 0.65]])


class SpeakerListener(Scenario[MPEConfig]):
    name = "simple_speaker_listener_v4"
    num_goals = 1
    """The landmark the listener must reach."""

    def make_layout(self) -> WorldLayout:
        agents = [AgentKind("speaker_0", size=0.075, collide=False, movable=False),
                  AgentKind("listener_0", size=0.075, collide=False, silent=True)]
        return WorldLayout(agents, [LandmarkKind(size=0.04, collide=False) for _ in range(3)], dim_c=3)

    def make_teams(self) -> list[list[int]]:
        return [[0], [1]]

    def observe(self, world: BatchedWorld) -> list[np.ndarray]:
        speaker = LANDMARK_COLORS[world.goals[:, :1]]
        pos = world.pos
        listener = np.concatenate([world.vel[:, 1], (pos[:, 2:] - pos[:, 1:2]).reshape(world.n, -1),
                                   world.comm[:, 0]], axis=-1)
        return [speaker, listener[:, None]]

    def rewards(self, world: BatchedWorld) -> np.ndarray:
        goal = world.pos[np.arange(world.n), 2 + world.goals[:, 0]]
        reward = -squared_length(world.pos[:, 1] - goal)
        return np.repeat(reward[:, None], 2, axis=1)

    def goals_of(self, world: Any) -> list[int]:
        return [world.landmarks.index(world.agents[0].goal_b)]


parallel_env, vector_env = creators(SpeakerListener, __name__)
