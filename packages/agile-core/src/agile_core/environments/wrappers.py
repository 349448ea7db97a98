"""Small observation wrappers a manifest can name in `environment.wrappers`.

Wrappers are referenced by dotted path, e.g. a partially observed CartPole that sees only the
cart position and the pole angle (the velocities removed)::

    environment:
      name: CartPole-v1
      wrappers:
        - name: agile_core.environments.wrappers:ObservationIndices
          kwargs: {indices: [0, 2]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["ObservationIndices"]


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
        space = env.observation_space
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
        self.indices = np.asarray(kept, dtype=np.int64)
        self.observation_space = spaces.Box(
            low=space.low[..., self.indices], high=space.high[..., self.indices], dtype=space.dtype,
        )

    def observation(self, observation: Any) -> np.ndarray:
        """The kept entries of `observation`."""
        return np.asarray(observation)[..., self.indices]
