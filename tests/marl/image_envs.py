"""A tiny PettingZoo Parallel env with channels-last ``[H, W, C]`` uint8 image observations per
agent (as cooperative pong's frames are), for the image wrappers and CNN training tests."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from tests.core.image_envs import CHANNELS, HEIGHT, WIDTH, frame


class ImagePairEnv(ParallelEnv):
    """Two agents each see an RGB frame ``(12, 16, 3)`` and score 1 when their action names its
    brighter half; episodes of `length` steps."""

    metadata: ClassVar[dict[str, Any]] = {"name": "image_pair_v0", "render_modes": []}

    def __init__(self, length: int = 8) -> None:
        self.possible_agents = ["player_0", "player_1"]
        self.agents: list[str] = []
        self.length = length
        self.t = 0
        self.np_random = np.random.default_rng()
        self.targets: dict[str, int] = {}

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0, 255, (HEIGHT, WIDTH, CHANNELS), np.uint8)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def _observe(self) -> dict[str, np.ndarray]:
        self.targets = {agent: int(self.np_random.integers(2)) for agent in self.agents}
        return {agent: frame(self.np_random, target) for agent, target in self.targets.items()}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        return self._observe(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        rewards = {agent: float(int(actions[agent]) == self.targets[agent]) for agent in self.agents}
        self.t += 1
        done = self.t >= self.length
        agents = list(self.agents)
        obs = self._observe()
        truncations = dict.fromkeys(agents, done)
        terminations = dict.fromkeys(agents, False)
        infos: dict[str, dict] = {agent: {} for agent in agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos
