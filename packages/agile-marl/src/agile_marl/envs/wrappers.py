"""Wrappers a multi-agent manifest can name in `environment.wrappers` (PettingZoo Parallel envs).

Image observations given channels-last (``[H, W, C]``, as PettingZoo's butterfly and Atari
environments do) must be moved channels-first for the CNN encoder::

    environment:
      name: pettingzoo.butterfly.cooperative_pong_v6
      wrappers:
        - name: agile_marl.envs.wrappers:ImageObservation
          kwargs: {grayscale: true, downsample: 4}          # (280, 480, 3) -> (1, 70, 120)
"""

from __future__ import annotations

from typing import Any

from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from agile_core.environments.images import ImageLayout

__all__ = ["ChannelsFirst", "ImageObservation"]


class ImageObservation(BaseParallelWrapper):
    """Re-lay out every agent's channels-last ``[H, W, C]`` image observations for the CNN encoder
    (agents whose observations are not 3-D Boxes are left alone; at least one must be).

    Args:
        env: A PettingZoo Parallel environment.
        channels_first: Move the channel axis first: ``[C, H, W]``.
        grayscale: Replace the 3 RGB channels by one luminance channel (BT.601 weights).
        downsample: Average ``downsample x downsample`` pixel blocks (1: keep every pixel).

    The arithmetic is :class:`agile_core.environments.images.ImageLayout`'s, as in the Gymnasium
    wrapper :class:`agile_core.environments.wrappers.ImageObservation`.
    """

    def __init__(self, env: ParallelEnv, channels_first: bool = True, grayscale: bool = False,
                 downsample: int = 1) -> None:
        super().__init__(env)
        self.layouts: dict[Any, ImageLayout] = {}
        for agent in env.possible_agents:
            space = env.observation_space(agent)
            if isinstance(space, spaces.Box) and len(space.shape) == 3:
                self.layouts[agent] = ImageLayout(space, channels_first, grayscale, downsample)
        if not self.layouts:
            raise TypeError("ImageObservation needs at least one agent with a channels-last [H, W, C] Box "
                            f"observation space, got {[env.observation_space(a) for a in env.possible_agents]}")
        self.observation_spaces = {agent: self.observation_space(agent) for agent in env.possible_agents}

    def observation_space(self, agent: Any) -> spaces.Space:
        """The agent's observation space in the new layout."""
        layout = self.layouts.get(agent)
        return self.env.observation_space(agent) if layout is None else layout.space

    def _relaid(self, observations: dict[Any, Any]) -> dict[Any, Any]:
        return {agent: self.layouts[agent](obs) if agent in self.layouts else obs
                for agent, obs in observations.items()}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """Reset the wrapped env; observations in the new layout."""
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._relaid(observations), infos

    def step(self, actions: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Step the wrapped env; observations in the new layout."""
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        return self._relaid(observations), rewards, terminations, truncations, infos


class ChannelsFirst(ImageObservation):
    """Move the channel axis of every agent's ``[H, W, C]`` image observations first: ``[C, H, W]``."""

    def __init__(self, env: ParallelEnv) -> None:
        super().__init__(env, channels_first=True)
