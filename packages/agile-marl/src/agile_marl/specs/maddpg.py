"""Registered hyperparameter specs of MADDPG and MATD3 (names and defaults users know)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from agile_core.specs.algorithm import MUTABLE, AlgorithmSpec

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
NonNegative = Annotated[float, Field(ge=0.0)]

__all__ = ["MADDPGSpec", "MATD3Spec"]


class MADDPGSpec(AlgorithmSpec):
    """Multi-Agent DDPG: decentralised actors, one centralised critic per agent."""

    name: Literal["MADDPG"] = "MADDPG"
    """Algorithm name."""
    batch_size: Annotated[PositiveInt, MUTABLE] = 64
    """Joint transitions sampled from the replay buffer per learning step."""
    lr_actor: Annotated[PositiveFloat, MUTABLE] = 1e-3
    """Adam learning rate of every agent's actor."""
    lr_critic: Annotated[PositiveFloat, MUTABLE] = 1e-2
    """Adam learning rate of every agent's critic."""
    learn_step: Annotated[PositiveInt, MUTABLE] = 5
    """Environment steps of one member (over all its sub-environments) between learning steps."""
    gamma: Annotated[Fraction, MUTABLE] = 0.95
    """Discount factor."""
    tau: Annotated[Fraction, MUTABLE] = 0.01
    """Soft target-network update rate (1.0 copies the online network)."""
    O_U_noise: Annotated[bool, MUTABLE] = True
    """Explore (Box actions) with Ornstein-Uhlenbeck noise; Gaussian noise when false."""
    expl_noise: Annotated[NonNegative, MUTABLE] = 0.1
    """Scale of the exploration noise, relative to half the action range."""
    vect_noise_dim: Annotated[PositiveInt, MUTABLE] = 1
    """Initial number of noise streams per agent; the streams follow the rows acting is called
    with (one per sub-environment)."""
    mean_noise: Annotated[float, MUTABLE] = 0.0
    """Mean of the exploration noise."""
    theta: Annotated[NonNegative, MUTABLE] = 0.15
    """Mean-reversion rate of the Ornstein-Uhlenbeck process."""
    dt: Annotated[PositiveFloat, MUTABLE] = 1e-2
    """Time step of the Ornstein-Uhlenbeck process."""
    normalize_images: Annotated[bool, MUTABLE] = True
    """Scale uint8 image observations to [0, 1]."""

    algorithm_class: ClassVar[str] = "agile_marl.maddpg:MADDPG"
    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr_actor", "lr_critic", "batch_size", "learn_step")


class MATD3Spec(MADDPGSpec):
    """Multi-Agent TD3: MADDPG with twin critics, clipped double-Q targets, target policy
    smoothing and delayed actor updates."""

    name: Literal["MATD3"] = "MATD3"  # type: ignore[assignment]
    """Algorithm name."""
    policy_freq: Annotated[PositiveInt, MUTABLE] = 2
    """Critic updates per actor (and target) update."""
    policy_noise: Annotated[NonNegative, MUTABLE] = 0.2
    """Std of the smoothing noise added to Box agents' target actions, relative to half the
    action range (Discrete agents' target actions are greedy one-hots, not smoothed)."""
    noise_clip: Annotated[NonNegative, MUTABLE] = 0.5
    """Clip of the target smoothing noise, relative to half the action range."""

    algorithm_class: ClassVar[str] = "agile_marl.matd3:MATD3"
