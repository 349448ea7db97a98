"""Tiny environments with channels-last ``[H, W, C]`` uint8 image observations (as Atari's and
PettingZoo butterfly's frames are), for the image wrappers and CNN training tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

HEIGHT, WIDTH, CHANNELS = 12, 16, 3


def frame(rng: np.random.Generator, target: int) -> np.ndarray:
    """A random RGB frame whose left or right half (`target` 0 or 1) is brighter."""
    image = rng.integers(0, 100, size=(HEIGHT, WIDTH, CHANNELS), dtype=np.uint8)
    half = WIDTH // 2
    image[:, target * half:(target + 1) * half] += 120
    return image


class ChannelsLastImageEnv(gym.Env):
    """Pick the brighter half of an RGB frame ``(12, 16, 3)``: reward 1 when the action names it;
    episodes of 8 steps."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, length: int = 8) -> None:
        self.observation_space = spaces.Box(0, 255, (HEIGHT, WIDTH, CHANNELS), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.length = length
        self.t = 0
        self.target = 0

    def _observe(self) -> np.ndarray:
        self.target = int(self.np_random.integers(2))
        return frame(self.np_random, self.target)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self.target)
        self.t += 1
        return self._observe(), reward, False, self.t >= self.length, {}
