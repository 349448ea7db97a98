"""Registered hyperparameter specs of the off-policy algorithms (names and defaults users know)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from agile_core.specs._base import field_error
from agile_core.specs.algorithm import MUTABLE, AlgorithmSpec
from agile_core.specs.training import ReplayBufferSpec

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
Discount = Annotated[float, Field(gt=0.0, le=1.0)]
Fraction = Annotated[float, Field(gt=0.0, le=1.0)]


class _OffPolicySpec(AlgorithmSpec):
    """Fields every off-policy algorithm shares."""

    batch_size: Annotated[PositiveInt, MUTABLE] = 64
    """Transitions sampled from the replay buffer per learning step."""
    learn_step: Annotated[PositiveInt, MUTABLE] = 5
    """Environment steps of one agent (over all its sub-environments) between learning steps."""
    gamma: Annotated[Discount, MUTABLE] = 0.99
    """Discount factor."""
    tau: Annotated[Fraction, MUTABLE] = 1e-3
    """Soft target-network update rate (1.0 copies the online network: a hard update)."""
    normalize_images: bool = True
    """Scale uint8 image observations to [0, 1]."""

    learns_from_n_step: ClassVar[bool] = False
    """Whether the algorithm's learning step reads n-step and prioritized replay (RainbowDQN)."""

    def section_issues(self, sections: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str, Any]]:
        """Also: prioritized or n-step replay only for algorithms that learn from them."""
        issues = super().section_issues(sections)
        buffer = sections.get("replay_buffer")
        if buffer is not None and not self.learns_from_n_step:
            wanted = {"per_buffer": buffer.per_buffer, "n_step_buffer": buffer.n_step_buffer,
                      "n_step": buffer.n_step is not None}
            for name, on in wanted.items():
                if on and name in buffer.model_fields_set:  # what the manifest asked for
                    issues.append((("replay_buffer", name), f"{self.registered_name()} learns from a standard "
                                   "replay buffer only; prioritized and n-step replay need RainbowDQN",
                                   getattr(buffer, name)))
        capacity = _replay_capacity(sections)
        if self.batch_size > capacity:
            issues.append((("algorithm", "batch_size"), f"is larger than the replay buffer (max_size {capacity}): "
                           "no batch could ever be drawn", self.batch_size))
        return issues

    def section_warnings(self, sections: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str, Any]]:
        """A warm-up or learning interval that the step budget never reaches: no learning at all."""
        warnings = super().section_warnings(sections)
        training = sections.get("training")
        budget = getattr(training, "max_steps", None)
        if budget is None:
            return warnings
        delay = getattr(training, "learning_delay", 0)
        if delay >= budget:
            warnings.append((("training", "learning_delay"), f"is not below max_steps ({budget}): "
                             "no agent would ever learn", delay))
        if self.learn_step > budget:
            warnings.append((("algorithm", "learn_step"), f"is above max_steps ({budget}): "
                             "no agent would ever learn", self.learn_step))
        return warnings


def _replay_capacity(sections: Mapping[str, Any]) -> int:
    """Transitions the run's replay buffer holds (the top-level section, else the training one)."""
    buffer = sections.get("replay_buffer") or getattr(sections.get("training"), "replay_buffer", None)
    return int((buffer or ReplayBufferSpec()).max_size)


class DQNSpec(_OffPolicySpec):
    """Deep Q-Network with epsilon-greedy exploration (schedule in `training.eps_*`)."""

    name: Literal["DQN"] = "DQN"
    """Algorithm name."""
    lr: Annotated[PositiveFloat, MUTABLE] = 1e-4
    """Adam learning rate."""
    double: bool = True
    """Double Q-learning: the online network picks the next action, the target network rates it."""
    loss: Literal["mse", "huber"] = "mse"
    """TD loss: the squared error, or Huber (smooth L1), which caps the pull of large TD errors."""
    max_grad_norm: PositiveFloat | None = 10.0
    """Clip each update's gradient to this global norm (null: no clipping). On LunarLander's -100/+100
    rewards the unclipped squared error collapsed; clipped at 10 the reference's dqn.yaml reaches 200
    (docs/learning.md), and CartPole learns as fast as unclipped."""

    algorithm_class: ClassVar[str] = "agile_offpolicy.dqn:DQN"


class RainbowDQNSpec(_OffPolicySpec):
    """Rainbow DQN: noisy nets, dueling heads, C51 distributional returns, n-step returns, PER."""

    name: Literal["RainbowDQN"] = "RainbowDQN"
    """Algorithm name."""
    lr: Annotated[PositiveFloat, MUTABLE] = 1e-4
    """Adam learning rate."""
    beta: Annotated[float, Field(ge=0.0, le=1.0), MUTABLE] = 0.4
    """Initial importance-sampling exponent of prioritized replay (annealed to 1 over the run)."""
    prior_eps: Annotated[PositiveFloat, MUTABLE] = 1e-6
    """Small constant added to priorities so no transition has zero probability."""
    num_atoms: Annotated[int, Field(ge=2)] = 51
    """Atoms of the categorical return distribution."""
    v_min: float = -10.0
    """Lowest return the distribution's support covers."""
    v_max: float = 10.0
    """Highest return the distribution's support covers."""
    noise_std: Annotated[float, Field(ge=0.0)] = 0.5
    """Initial standard deviation of the noisy layers."""
    n_step: PositiveInt = 3
    """Steps of the n-step return (sizes the n-step buffer unless `replay_buffer` sets `n_step`);
    n-step and prioritized replay are switched on in the `replay_buffer` section."""
    combined_reward: bool = False
    """Add the 1-step and n-step losses instead of using the n-step loss alone."""

    algorithm_class: ClassVar[str] = "agile_offpolicy.rainbow:RainbowDQN"
    learns_from_n_step: ClassVar[bool] = True

    @model_validator(mode="after")
    def _support_ordered(self) -> RainbowDQNSpec:
        if not self.v_min < self.v_max:
            raise field_error("v_max", f"must be greater than v_min ({self.v_min})")
        return self


class DDPGSpec(_OffPolicySpec):
    """Deep Deterministic Policy Gradient for continuous (Box) actions."""

    name: Literal["DDPG"] = "DDPG"
    """Algorithm name."""
    lr_actor: Annotated[PositiveFloat, MUTABLE] = 1e-4
    """Adam learning rate of the actor."""
    lr_critic: Annotated[PositiveFloat, MUTABLE] = 1e-3
    """Adam learning rate of the critic."""
    policy_freq: Annotated[PositiveInt, MUTABLE] = 2
    """Critic updates per actor (and target) update."""
    O_U_noise: bool = True
    """Explore with Ornstein-Uhlenbeck noise (Gaussian noise when false)."""
    expl_noise: Annotated[float, Field(ge=0.0)] = 0.1
    """Scale of the exploration noise, relative to half the action range."""
    vect_noise_dim: PositiveInt = 1
    """Number of independent noise processes (one per sub-environment is typical)."""
    mean_noise: float = 0.0
    """Mean of the exploration noise."""
    theta: Annotated[float, Field(ge=0.0)] = 0.15
    """Mean-reversion rate of the Ornstein-Uhlenbeck process."""
    dt: PositiveFloat = 1e-2
    """Time step of the Ornstein-Uhlenbeck process."""
    share_encoders: bool = False
    """Let the critic reuse the actor's observation encoder."""

    algorithm_class: ClassVar[str] = "agile_offpolicy.ddpg:DDPG"
    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr_actor", "lr_critic", "batch_size", "learn_step")

    def section_issues(self, sections: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str, Any]]:
        """Also: one noise stream shared by all sub-envs, or one per sub-env."""
        return [*super().section_issues(sections), *noise_streams_issues(self.vect_noise_dim, sections)]


class TD3Spec(DDPGSpec):
    """Twin Delayed DDPG: twin critics, delayed policy updates, target policy smoothing."""

    name: Literal["TD3"] = "TD3"  # type: ignore[assignment]
    """Algorithm name."""
    tau: Annotated[Fraction, MUTABLE] = 5e-3
    """Soft target-network update rate."""
    policy_noise: Annotated[float, Field(ge=0.0)] = 0.2
    """Std of the smoothing noise added to target actions, relative to half the action range
    (agile addition)."""
    noise_clip: Annotated[float, Field(ge=0.0)] = 0.5
    """Clip of the target smoothing noise, relative to half the action range (agile addition)."""

    algorithm_class: ClassVar[str] = "agile_offpolicy.td3:TD3"


ALGORITHM_SPECS = (DQNSpec, RainbowDQNSpec, DDPGSpec, TD3Spec)


def noise_streams_issues(vect_noise_dim: int, sections: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str, Any]]:
    """`vect_noise_dim` must be 1 (one stream for every sub-env) or `environment.num_envs`."""
    num_envs = getattr(sections.get("environment"), "num_envs", None)
    if num_envs is None or vect_noise_dim in (1, num_envs):
        return []
    return [(("algorithm", "vect_noise_dim"), f"must be 1 (one noise stream for all sub-envs) or "
             f"environment.num_envs ({num_envs}, one per sub-env)", vect_noise_dim)]
