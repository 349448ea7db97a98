"""simple_crypto_v3: alice encodes the goal (one of 2 one-hot colors) with a key bob shares; eve,
without the key, eavesdrops. Nobody moves. Good agents are rewarded by minus bob's squared error
plus eve's; eve by minus hers (an all-zero utterance counts as no guess).

Observations: alice ``[goal_color, key]``; bob ``[key, alice_utterance]``; eve
``[alice_utterance]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agile_marl.mpe.config import MPEConfig
from agile_marl.mpe.core import AgentKind, BatchedWorld, LandmarkKind, WorldLayout
from agile_marl.mpe.creators import creators
from agile_marl.mpe.scenario import Scenario

DIM_C = 4
COLORS = np.eye(DIM_C)[:2]
"""Landmark i's color: one-hot i, as long as an utterance."""


class Crypto(Scenario[MPEConfig]):
    name = "simple_crypto_v3"
    num_goals = 2
    """Columns: the goal landmark, the key landmark."""

    def make_layout(self) -> WorldLayout:
        agents = [AgentKind(name, movable=False, collide=False) for name in ("eve_0", "bob_0", "alice_0")]
        return WorldLayout(agents, [LandmarkKind(collide=False) for _ in range(2)], dim_c=DIM_C)

    def make_teams(self) -> list[list[int]]:
        return [[0], [1], [2]]

    def observe(self, world: BatchedWorld) -> list[np.ndarray]:
        goal, key = COLORS[world.goals[:, 0]], COLORS[world.goals[:, 1]]
        alice = world.comm[:, 2]
        return [alice[:, None], np.concatenate([key, alice], axis=-1)[:, None],
                np.concatenate([goal, key], axis=-1)[:, None]]

    def rewards(self, world: BatchedWorld) -> np.ndarray:
        goal = COLORS[world.goals[:, 0]]
        errors = np.sum(np.square(world.comm[:, :2] - goal[:, None]), axis=-1)  # eve, bob
        errors = np.where(world.comm[:, :2].any(axis=-1), errors, 0.0)  # silence is no guess
        good = errors[:, 0] + -errors[:, 1]
        return np.stack([-errors[:, 0], good, good], axis=1)

    def goals_of(self, world: Any) -> list[int]:
        return [world.landmarks.index(world.agents[0].goal_a), int(np.argmax(world.agents[2].key))]


parallel_env, vector_env = creators(Crypto, __name__)
