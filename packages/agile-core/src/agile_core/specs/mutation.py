"""Mutation section of a manifest: operator probabilities and hyperparameter ranges."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from agile_core.specs._base import Spec, field_error

Weight = Annotated[float, Field(ge=0.0)]


class MutationProbabilities(Spec):
    """Relative weights of the mutation operators; one operator is applied per agent per generation.

    The weights are normalised by their sum, so `{no_mut: 1, rl_hp_mut: 1}` means half and half.
    """

    no_mut: Weight = 0.4
    """Weight of leaving the agent unchanged."""
    arch_mut: Weight = 0.2
    """Weight of an architecture mutation (a layer or node change, see `new_layer`)."""
    new_layer: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2
    """Probability that an architecture mutation changes layers rather than nodes."""
    params_mut: Weight = 0.2
    """Weight of adding Gaussian noise (scale `mutation_sd`) to the network parameters."""
    act_mut: Weight = 0.0
    """Weight of changing the activation function."""
    rl_hp_mut: Weight = 0.2
    """Weight of perturbing one RL hyperparameter from `rl_hp_selection`."""

    @model_validator(mode="after")
    def _some_weight(self) -> MutationProbabilities:
        if self.no_mut + self.arch_mut + self.params_mut + self.act_mut + self.rl_hp_mut <= 0:
            raise field_error("no_mut", "at least one of no_mut, arch_mut, params_mut, act_mut, rl_hp_mut must be > 0")
        return self

    def operator_weights(self) -> dict[str, float]:
        """Normalised probability of each operator (no_mut, arch_mut, params_mut, act_mut, rl_hp_mut)."""
        raw = {
            "no_mut": self.no_mut,
            "arch_mut": self.arch_mut,
            "params_mut": self.params_mut,
            "act_mut": self.act_mut,
            "rl_hp_mut": self.rl_hp_mut,
        }
        total = sum(raw.values())
        return {name: value / total for name, value in raw.items()}


class RLHyperparameter(Spec):
    """The range an RL hyperparameter may be mutated within, and how far one mutation moves it."""

    min: float
    """Smallest value mutation may produce (inclusive)."""
    max: float
    """Largest value mutation may produce (inclusive)."""
    grow_factor: Annotated[float, Field(ge=1.0)] | None = None
    """Multiplier when the value grows (1.2 for floats, 1.5 for integers when null)."""
    shrink_factor: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Multiplier when the value shrinks (0.8 for floats, 0.75 for integers when null)."""

    @model_validator(mode="after")
    def _ordered(self) -> RLHyperparameter:
        if self.min > self.max:
            raise field_error("max", f"must not be below min ({self.min:g})")
        return self


class MutationSpec(Spec):
    """Evolutionary HPO settings: which mutations happen, how strong, on which hyperparameters."""

    probabilities: MutationProbabilities = Field(default_factory=MutationProbabilities)
    """Relative weights of the mutation operators."""
    rl_hp_selection: dict[str, RLHyperparameter] | None = None
    """Hyperparameters that `rl_hp_mut` may change, with their ranges; the algorithm's defaults
    (learning rates, batch_size, learn_step) when null. Each key must be a numeric hyperparameter
    of the chosen algorithm."""
    mutation_sd: Annotated[float, Field(ge=0.0)] = 0.1
    """Standard deviation of the parameter-noise mutation, relative to each weight's scale."""
    rand_seed: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = None
    """Seed of the mutation random generator, so the sequence of mutations is reproducible."""
