"""Registered hyperparameter spec of CQN (names and defaults users know)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from agile_core.specs.algorithm import MUTABLE, AlgorithmSpec

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
Fraction = Annotated[float, Field(gt=0.0, le=1.0)]

__all__ = ["CQNSpec"]


class CQNSpec(AlgorithmSpec):
    """Conservative Q-learning on a discrete-action Q network, trained from a fixed dataset."""

    name: Literal["CQN"] = "CQN"
    """Algorithm name."""
    batch_size: Annotated[PositiveInt, MUTABLE] = 64
    """Dataset transitions sampled per learning step."""
    lr: Annotated[PositiveFloat, MUTABLE] = 1e-4
    """Adam learning rate."""
    learn_step: Annotated[PositiveInt, MUTABLE] = 5
    """Kept for manifests written for other Q-learners; offline training learns on every step
    (one training step is one gradient step), so it has no effect there."""
    gamma: Annotated[Fraction, MUTABLE] = 0.99
    """Discount factor."""
    tau: Annotated[Fraction, MUTABLE] = 1e-3
    """Soft target-network update rate (1.0 copies the online network: a hard update)."""
    double: bool = False
    """Double Q-learning: the online network picks the next action, the target network rates it."""
    cql_alpha: Annotated[float, Field(ge=0.0), MUTABLE] = 1.0
    """Weight of the conservative penalty ``logsumexp_a Q(s, a) - Q(s, a_data)`` (0: plain DQN
    on the dataset)."""
    normalize_images: bool = True
    """Scale uint8 image observations to [0, 1]."""
    loss: Literal["mse", "huber"] = "mse"
    """TD loss: the squared error, or Huber (smooth L1), which caps the pull of large TD errors."""
    max_grad_norm: PositiveFloat | None = None
    """Clip each update's gradient to this global norm (null: no clipping)."""

    algorithm_class: ClassVar[str] = "agile_offline.cqn:CQN"
    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr", "batch_size")
    default_evo_steps: ClassVar[int] = 5_000
