"""Registered hyperparameter specs of the on-policy algorithms."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from agile_core.specs.algorithm import MUTABLE, AlgorithmSpec, UpdateEpochs

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0.0)]


class PPOSpec(AlgorithmSpec):
    """Proximal Policy Optimization (discrete, continuous and recurrent policies)."""

    name: Literal["PPO"] = "PPO"
    """Algorithm name."""
    batch_size: Annotated[PositiveInt, MUTABLE] = 64
    """Minibatch size of each gradient step."""
    lr: Annotated[PositiveFloat, MUTABLE] = 1e-4
    """Adam learning rate."""
    learn_step: Annotated[PositiveInt, MUTABLE] = 4096
    """Environment steps per rollout, over all of an agent's sub-environments."""
    gamma: Annotated[float, Field(gt=0.0, le=1.0), MUTABLE] = 0.99
    """Discount factor."""
    gae_lambda: Annotated[float, Field(ge=0.0, le=1.0), MUTABLE] = 0.95
    """GAE lambda (bias-variance trade-off of the advantage estimate)."""
    action_std_init: Annotated[float, Field(ge=0.0), MUTABLE] = 0.6
    """Initial standard deviation of Gaussian policies (Box actions, where it must be positive);
    unused for discrete actions, so 0 is accepted there."""
    clip_coef: Annotated[PositiveFloat, MUTABLE] = 0.2
    """Clipping range of the probability ratio."""
    ent_coef: Annotated[float, Field(ge=0.0), MUTABLE] = 0.01
    """Weight of the entropy bonus."""
    vf_coef: Annotated[float, Field(ge=0.0), MUTABLE] = 0.5
    """Weight of the value loss."""
    max_grad_norm: Annotated[PositiveFloat, MUTABLE] = 0.5
    """Gradient-norm clipping threshold."""
    target_kl: Annotated[PositiveFloat | None, MUTABLE] = None
    """Stop the update epochs early when the approximate KL divergence exceeds this."""
    update_epochs: Annotated[UpdateEpochs, MUTABLE] = 4
    """Passes over each rollout."""
    share_encoders: bool = True
    """Actor and critic share one observation encoder."""
    recurrent: bool = False
    """Use an LSTM encoder and train with backpropagation through time."""
    bptt_sequence_type: Literal["chunked", "maximum", "fifty_percent_overlap"] = "chunked"
    """How rollouts are cut into sequences for recurrent training."""
    max_seq_len: Annotated[PositiveInt | None, MUTABLE] = None
    """Length of the BPTT sequences (the whole rollout when null)."""
    normalize_advantages: bool = True
    """Normalise advantages within each minibatch (agile addition)."""
    clip_vloss: bool = False
    """Clip the value update like the policy ratio (agile addition)."""
    use_gae: bool = True
    """Use GAE advantages (Monte-Carlo returns minus the value when false; agile addition)."""
    normalize_images: bool = True
    """Scale uint8 image observations to [0, 1]."""

    algorithm_class: ClassVar[str] = "agile_onpolicy.ppo:PPO"
    default_ranges: ClassVar[dict[str, tuple[float, float]]] = {"learn_step": (512, 8192)}


class RecurrentPPOSpec(PPOSpec):
    """PPO with an LSTM policy: `PPO` with `recurrent: true` and longer rollouts."""

    name: Literal["RecurrentPPO"] = "RecurrentPPO"  # type: ignore[assignment]
    """Algorithm name."""
    learn_step: Annotated[PositiveInt, MUTABLE] = 8192
    """Environment steps per rollout, over all of an agent's sub-environments."""
    recurrent: bool = True
    """Use an LSTM encoder (always true for RecurrentPPO)."""


ALGORITHM_SPECS = (PPOSpec, RecurrentPPOSpec)
