"""Batch containers returned by the replay buffers."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["NStepBatch", "PrioritizedBatch", "ReplayBatch", "Transitions"]


class Transitions(NamedTuple):
    """Batched numpy 1-step transitions, field order matching ``ReplayBuffer.add``.

    ``obs``/``next_obs`` are nested like the observation space; ``reward`` is float32
    and ``terminated`` bool, both of shape ``[rows]``. ``buffer.add(*transitions)``
    stores them.
    """

    obs: Any
    action: Any
    reward: np.ndarray
    next_obs: Any
    terminated: np.ndarray


class ReplayBatch(NamedTuple):
    """A sampled batch of 1-step transitions (tensors) and their storage ``indices`` (numpy int64).

    ``done`` is 1.0 only for terminations; truncated transitions have ``done == 0``.
    """

    obs: Any
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: Any
    done: torch.Tensor
    indices: np.ndarray


class NStepBatch(NamedTuple):
    """A sampled batch of n-step transitions.

    ``reward`` is the discounted n-step return, ``next_obs`` the observation after
    ``n_steps`` steps and the bootstrap term must be discounted by ``gamma ** n_steps``
    (``n_steps`` is int64, smaller than n at episode ends).
    """

    obs: Any
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: Any
    done: torch.Tensor
    n_steps: torch.Tensor
    indices: np.ndarray


class PrioritizedBatch(NamedTuple):
    """A prioritised batch: a 1-step batch plus normalised importance ``weights`` (float32)."""

    obs: Any
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: Any
    done: torch.Tensor
    weights: torch.Tensor
    indices: np.ndarray
