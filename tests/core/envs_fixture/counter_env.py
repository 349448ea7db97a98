"""A tiny custom environment loaded by path in the tests (and a broken one)."""

import gymnasium as gym
import numpy as np


class CounterEnv(gym.Env):
    """Observation counts steps; the episode ends after `length` steps."""

    def __init__(self, length: int = 5, render_mode: str | None = None) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(0, 100, (1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], dtype=np.float32), 1.0, self.t >= self.length, False, {}
