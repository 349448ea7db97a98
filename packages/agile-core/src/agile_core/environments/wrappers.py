"""Small observation wrappers a manifest can name in `environment.wrappers`.

Wrappers are referenced by dotted path, e.g. a partially observed CartPole that sees only the
cart position and the pole angle (the velocities removed)::

    environment:
      name: CartPole-v1
      wrappers:
        - name: agile_core.environments.wrappers:ObservationIndices
          kwargs: {indices: [0, 2]}

A wrapper class with a ``vectorized(env, **kwargs)`` classmethod can also wrap a whole vector
environment; when every wrapper a manifest names has one, an environment with a native vector
implementation (CartPole, Pendulum...) keeps it instead of falling back to one Python env per
sub-environment.

Channels-last images (``[H, W, C]``, as Atari's raw frames) must be moved channels-first for the
CNN encoder::

    environment:
      name: ALE/Breakout-v5
      wrappers:
        - agile_core.environments.wrappers:ChannelsFirst      # (210, 160, 3) -> (3, 210, 160)

:class:`ImageObservation` also downsamples and converts to grayscale. The image wrappers have no
``vectorized`` form on purpose: naming one makes every sub-environment a ``gymnasium.make`` env
whose frames they re-lay out (a native vector env such as ale-py's ``AtariVectorEnv`` already gives
its own ``[stack, 84, 84]`` layout, used when no such wrapper is named).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv, VectorObservationWrapper
from gymnasium.vector.utils import batch_space

from agile_core.environments.images import ImageLayout

__all__ = ["ChannelsFirst", "ImageObservation", "ObservationIndices", "VectorObservationIndices"]


def _kept_indices(space: spaces.Space, indices: Sequence[int]) -> tuple[np.ndarray, spaces.Box]:
    """The non-negative positions `indices` name along `space`'s last axis, and the Box of the
    kept entries (their bounds and dtype); ValueError/TypeError naming what is wrong."""
    if not isinstance(space, spaces.Box) or len(space.shape) == 0:
        raise TypeError(f"ObservationIndices needs a Box observation space with at least one axis, got {space}")
    size = space.shape[-1]
    raw = [int(i) for i in indices]
    if not raw:
        raise ValueError("indices must name at least one observation entry")
    bad = [i for i in raw if not -size <= i < size]
    if bad:
        raise ValueError(f"indices {bad} lie outside the observation's last axis of size {size}")
    kept = [i % size for i in raw]
    if len(set(kept)) != len(kept):
        raise ValueError(f"indices must not repeat an entry, got {raw}")
    chosen = np.asarray(kept, dtype=np.int64)
    return chosen, spaces.Box(low=space.low[..., chosen], high=space.high[..., chosen], dtype=space.dtype)


class ObservationIndices(gym.ObservationWrapper):
    """Keep only the given entries of a Box observation's last axis (in the order given).

    Args:
        env: Environment with a :class:`~gymnasium.spaces.Box` observation space.
        indices: Positions along the last axis to keep (negative positions count from the end);
            at least one, no repeats.

    The new observation space keeps the bounds and dtype of the kept entries, so a 4-dimensional
    CartPole observation with ``indices=[0, 2]`` becomes the 2-dimensional
    ``[cart position, pole angle]`` with no velocity information.
    """

    def __init__(self, env: gym.Env, indices: Sequence[int]) -> None:
        super().__init__(env)
        self.indices, self.observation_space = _kept_indices(env.observation_space, indices)

    @classmethod
    def vectorized(cls, env: VectorEnv, indices: Sequence[int]) -> VectorEnv:
        """The same selection applied to every sub-environment of a vector env at once."""
        return VectorObservationIndices(env, indices)

    def observation(self, observation: Any) -> np.ndarray:
        """The kept entries of `observation`."""
        return np.asarray(observation)[..., self.indices]


class VectorObservationIndices(VectorObservationWrapper):
    """:class:`ObservationIndices` for a whole vector environment: one indexing of the batched
    observation per step instead of one per sub-environment."""

    def __init__(self, env: VectorEnv, indices: Sequence[int]) -> None:
        super().__init__(env)
        self.indices, self.single_observation_space = _kept_indices(env.single_observation_space, indices)
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)

    def observations(self, observations: Any) -> np.ndarray:
        """The kept entries of every sub-environment's observation."""
        return np.asarray(observations)[..., self.indices]


class ImageObservation(gym.ObservationWrapper):
    """Re-lay out channels-last ``[H, W, C]`` image observations for the CNN encoder.

    Args:
        env: Environment with a 3-D :class:`~gymnasium.spaces.Box` observation space ``[H, W, C]``.
        channels_first: Move the channel axis first: ``[C, H, W]`` (what the CNN encoder reads).
        grayscale: Replace the 3 RGB channels by one luminance channel (BT.601 weights).
        downsample: Average ``downsample x downsample`` pixel blocks (1: keep every pixel); the
            image is cropped to a multiple of the block first.

    uint8 images stay uint8 (rounded), so replay buffers keep them small and the encoder's
    preprocessing still scales them to [0, 1]. For example a (280, 480, 3) frame with
    ``grayscale=True, downsample=4`` becomes (1, 70, 120).
    """

    def __init__(self, env: gym.Env, channels_first: bool = True, grayscale: bool = False,
                 downsample: int = 1) -> None:
        super().__init__(env)
        self.layout = ImageLayout(env.observation_space, channels_first, grayscale, downsample)
        self.observation_space = self.layout.space

    def observation(self, observation: Any) -> np.ndarray:
        """`observation` in the new layout."""
        return self.layout(observation)


class ChannelsFirst(ImageObservation):
    """Move the channel axis of ``[H, W, C]`` image observations first: ``[C, H, W]``, the layout
    agile's CNN encoder reads (``ALE/Breakout-v5``: (210, 160, 3) -> (3, 210, 160))."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env, channels_first=True)
