"""An environment whose observation has the wrong shape."""

import gymnasium as gym
import numpy as np


class WrongShapeEnv(gym.Env):
    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1, 1, (3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(4, dtype=np.float32), 0.0, False, False, {}
