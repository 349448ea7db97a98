"""Registered hyperparameter spec of IPPO (independent PPO per agent group)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from agile_core.specs.algorithm import MUTABLE, AlgorithmSpec, UpdateEpochs

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
NonNegative = Annotated[float, Field(ge=0.0)]

__all__ = ["IPPOSpec"]


class IPPOSpec(AlgorithmSpec):
    """Independent PPO: one PPO learner (actor and critic) per agent group, fed by all of its agents."""

    name: Literal["IPPO"] = "IPPO"
    """Algorithm name."""
    batch_size: Annotated[PositiveInt, MUTABLE] = 64
    """Rows (agent steps of one agent group) per minibatch."""
    lr: Annotated[PositiveFloat, MUTABLE] = 1e-4
    """Adam learning rate (one optimizer per agent group over its actor and critic)."""
    learn_step: Annotated[PositiveInt, MUTABLE] = 4096
    """Environment steps per rollout, over all sub-environments (``ceil(learn_step / num_envs)`` vector steps)."""
    gamma: Annotated[float, Field(gt=0.0, le=1.0), MUTABLE] = 0.99
    """Discount factor."""
    gae_lambda: Annotated[float, Field(ge=0.0, le=1.0), MUTABLE] = 0.95
    """GAE lambda."""
    action_std_init: Annotated[float, Field(ge=0.0), MUTABLE] = 0.6
    """Initial standard deviation of Gaussian policies (Box actions, where it must be positive);
    unused for discrete actions, so 0 is accepted there."""
    clip_coef: Annotated[PositiveFloat, MUTABLE] = 0.2
    """Clipping range of the probability ratio (and of the value with `clip_vloss`)."""
    ent_coef: Annotated[NonNegative, MUTABLE] = 0.01
    """Weight of the entropy bonus."""
    vf_coef: Annotated[NonNegative, MUTABLE] = 0.5
    """Weight of the value loss."""
    max_grad_norm: Annotated[PositiveFloat, MUTABLE] = 0.5
    """Gradient-norm clipping threshold (per agent group's actor and critic)."""
    target_kl: Annotated[PositiveFloat | None, MUTABLE] = None
    """Stop an agent group's update epochs when a minibatch's approximate KL exceeds this."""
    update_epochs: Annotated[UpdateEpochs, MUTABLE] = 4
    """Passes over each rollout."""
    normalize_advantages: Annotated[bool, MUTABLE] = True
    """Standardise advantages within each minibatch (as PPO does)."""
    clip_vloss: Annotated[bool, MUTABLE] = False
    """Clip the value update like the probability ratio (as PPO's option)."""

    algorithm_class: ClassVar[str] = "agile_marl.ippo:IPPO"
    default_ranges: ClassVar[dict[str, tuple[float, float]]] = {"learn_step": (512, 8192)}
