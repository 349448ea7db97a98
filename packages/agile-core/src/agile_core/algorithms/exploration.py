"""Exploration noise for deterministic continuous-control policies (DDPG, TD3, MADDPG, MATD3).

A deterministic actor always proposes the same action for the same observation, so it explores
by adding noise to that action. Two processes are provided, both vectorised over ``num_envs``
independent streams (one per sub-environment) and seeded by a numpy ``Generator``:

* :class:`GaussianNoise` -- independent draws ``eps_t ~ N(mean, std^2)`` at every step.
* :class:`OrnsteinUhlenbeckNoise` -- temporally correlated noise, the Euler-Maruyama
  discretisation of ``dx = theta (mean - x) dt + sigma dW``::

      x_{t+1} = x_t + theta * (mean - x_t) * dt + sigma * sqrt(dt) * N(0, 1)

  Each stream is pulled back towards `mean` at rate `theta`; its stationary distribution is
  ``N(mean, sigma^2 / (2 theta))``. Consecutive samples are correlated, which gives smoother,
  more persistent exploration in physical control tasks. When a sub-environment's episode ends,
  :meth:`ActionNoise.reset` with a mask puts just that stream back at its initial value.

The noise is expressed in *normalised* action units (an action range of ``[-1, 1]``); the agent
rescales it by half of its action range before adding it to the action.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ActionNoise", "GaussianNoise", "OrnsteinUhlenbeckNoise", "make_action_noise"]


def _shape(action_shape: int | Sequence[int]) -> tuple[int, ...]:
    shape = (int(action_shape),) if isinstance(action_shape, int | np.integer) else tuple(int(d) for d in action_shape)
    if any(d < 1 for d in shape):
        raise ValueError(f"action_shape must have positive dimensions, got {shape}")
    return shape


class ActionNoise(ABC):
    """`num_envs` independent noise streams, each of shape `action_shape`.

    ``sample()`` returns ``[num_envs, *action_shape]`` float64 noise and advances every stream;
    ``reset(mask)`` restarts the streams selected by a boolean mask (all when None).
    """

    def __init__(self, action_shape: int | Sequence[int], num_envs: int = 1,
                 rng: np.random.Generator | int | None = None) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        self.action_shape = _shape(action_shape)
        self.num_envs = int(num_envs)
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one sample: ``(num_envs, *action_shape)``."""
        return (self.num_envs, *self.action_shape)

    @abstractmethod
    def sample(self) -> np.ndarray:
        """The next noise value of every stream, ``[num_envs, *action_shape]``."""

    def reset(self, mask: Any = None) -> None:  # noqa: B027 - stateless noise has nothing to reset
        """Restart the streams where `mask` (bool ``[num_envs]``) is true; all streams when None."""

    def _mask(self, mask: Any) -> np.ndarray:
        """`mask` as a bool ``[num_envs]`` array (all true when None)."""
        if mask is None:
            return np.ones(self.num_envs, dtype=bool)
        selected = np.asarray(mask, dtype=bool).reshape(-1)
        if selected.shape[0] != self.num_envs:
            raise ValueError(f"reset mask has {selected.shape[0]} entries for {self.num_envs} noise streams")
        return selected


class GaussianNoise(ActionNoise):
    """Uncorrelated noise: every sample is a fresh draw from ``N(mean, std^2)``."""

    def __init__(self, action_shape: int | Sequence[int], num_envs: int = 1, std: float = 0.1, mean: float = 0.0,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__(action_shape, num_envs, rng)
        if not std >= 0:
            raise ValueError(f"std must be >= 0, got {std}")
        self.std = float(std)
        self.mean = float(mean)

    def sample(self) -> np.ndarray:
        """Independent Gaussian draws ``[num_envs, *action_shape]``."""
        return self.rng.normal(self.mean, self.std, size=self.shape)

    def __repr__(self) -> str:
        return f"GaussianNoise(action_shape={self.action_shape}, num_envs={self.num_envs}, std={self.std}, mean={self.mean})"


class OrnsteinUhlenbeckNoise(ActionNoise):
    """Mean-reverting, temporally correlated noise (one Ornstein-Uhlenbeck process per stream).

    Args:
        action_shape: Shape of one action.
        num_envs: Number of independent streams (one per sub-environment).
        sigma: Diffusion scale of the process.
        mean: Long-run mean the process reverts to.
        theta: Mean-reversion rate (0: a pure random walk).
        dt: Time step of the discretisation.
        initial: Value a stream starts from and returns to on reset (default: `mean`).
        rng: Generator or seed.
    """

    def __init__(self, action_shape: int | Sequence[int], num_envs: int = 1, sigma: float = 0.1,
                 mean: float = 0.0, theta: float = 0.15, dt: float = 1e-2, initial: float | None = None,
                 rng: np.random.Generator | int | None = None) -> None:
        super().__init__(action_shape, num_envs, rng)
        if not sigma >= 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        if not theta >= 0:
            raise ValueError(f"theta must be >= 0, got {theta}")
        if not dt > 0:
            raise ValueError(f"dt must be > 0, got {dt}")
        self.sigma = float(sigma)
        self.mean = float(mean)
        self.theta = float(theta)
        self.dt = float(dt)
        self.initial = self.mean if initial is None else float(initial)
        self.state = np.full(self.shape, self.initial, dtype=np.float64)

    def sample(self) -> np.ndarray:
        """Advance every process by one step of ``dt``; return the new values (a copy)."""
        drift = self.theta * (self.mean - self.state) * self.dt
        diffusion = self.sigma * math.sqrt(self.dt) * self.rng.standard_normal(self.shape)
        self.state = self.state + drift + diffusion
        return self.state.copy()

    def reset(self, mask: Any = None) -> None:
        """Put the selected processes (all when `mask` is None) back at their initial value."""
        self.state[self._mask(mask)] = self.initial

    @property
    def stationary_std(self) -> float:
        """Standard deviation of the process's stationary distribution, ``sigma / sqrt(2 theta)``
        (inf when ``theta == 0``); exact for the continuous process, close for small ``theta dt``."""
        return math.inf if self.theta == 0 else self.sigma / math.sqrt(2.0 * self.theta)

    def __repr__(self) -> str:
        return (f"OrnsteinUhlenbeckNoise(action_shape={self.action_shape}, num_envs={self.num_envs}, "
                f"sigma={self.sigma}, mean={self.mean}, theta={self.theta}, dt={self.dt})")


def make_action_noise(ornstein_uhlenbeck: bool, action_shape: int | Sequence[int], num_envs: int, scale: float,
                      mean: float = 0.0, theta: float = 0.15, dt: float = 1e-2,
                      rng: np.random.Generator | int | None = None) -> ActionNoise:
    """The exploration noise of the DDPG-family specs: OU (`scale` is sigma) or Gaussian (`scale` is std)."""
    if ornstein_uhlenbeck:
        return OrnsteinUhlenbeckNoise(action_shape, num_envs, sigma=scale, mean=mean, theta=theta, dt=dt, rng=rng)
    return GaussianNoise(action_shape, num_envs, std=scale, mean=mean, rng=rng)
