"""Mutation section of a manifest: operator probabilities and hyperparameter ranges."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, Field, model_validator

from agile_core.specs._base import Spec, field_error

MAX_WEIGHT = 1e6
Weight = Annotated[float, Field(ge=0.0, le=MAX_WEIGHT)]
"""A relative weight: weights are normalised by their sum, so their scale carries no meaning; a
bound keeps that sum finite (weights of 1e308 overflowed it and made every probability NaN)."""


OPERATOR_FIELDS = ("no_mut", "arch_mut", "params_mut", "act_mut", "rl_hp_mut")
"""The weights of the mutation operators, in `Mutations`' order."""

PARAMS_MUT_FIELDS = ("mutation_sd", "amplified_gauss_param_mut", "random_reset_param_mut")
"""`MutationSpec` fields that only `params_mut` reads."""


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

    def restricted_to(self, operators: frozenset[str]) -> MutationProbabilities:
        """These weights with every operator outside `operators` at 0 (and `new_layer` at 0 when
        `arch_mut` is out); when nothing is left, `no_mut` alone."""
        update: dict[str, float] = {name: 0.0 for name in OPERATOR_FIELDS if name not in operators}
        if "arch_mut" not in operators:
            update["new_layer"] = 0.0
        restricted = self.model_copy(update=update)
        if sum(getattr(restricted, name) for name in OPERATOR_FIELDS) <= 0:
            restricted = restricted.model_copy(update={"no_mut": 1.0})
        return restricted

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
    mutate_elite: bool = False
    """Mutate the elite too (under elitism it is otherwise carried to the next generation unchanged)."""
    amplified_gauss_param_mut: bool = Field(default=False, validation_alias=AliasChoices(
        "amplified_gauss_param_mut", "super_param_mut"))
    """Give `params_mut` its amplified band: 5% of the perturbed weights get noise at 10 times their
    own magnitude (alias `super_param_mut`)."""
    random_reset_param_mut: bool = Field(default=False, validation_alias=AliasChoices(
        "random_reset_param_mut", "reset_param_mut"))
    """Give `params_mut` its random-reset band: 5% of the perturbed weights are replaced by a
    standard normal draw (alias `reset_param_mut`)."""
    regrama_param_mut: bool = False
    """Accepted for manifests written for the reference trainer (reset of dormant neurons before
    the parameter noise); agile does not implement it, so `true` is ignored with a warning."""
    dormant_threshold: Annotated[float, Field(ge=0.0)] | None = None
    """Dormancy threshold of `regrama_param_mut` (accepted, unused)."""

    def restricted_to(self, operators: frozenset[str]) -> MutationSpec:
        """This section with the weights of every operator outside `operators` at 0 (see
        :meth:`MutationProbabilities.restricted_to`)."""
        return self.model_copy(update={"probabilities": self.probabilities.restricted_to(operators)})

    def unusable_fields(self, operators: frozenset[str]) -> list[tuple[tuple[str, ...], Any, str]]:
        """``(path, value, operator)`` of each field this section sets explicitly that only an
        `operator` outside `operators` uses: its weight (when above 0), `new_layer` (arch_mut's)
        and the parameter-noise settings (params_mut's, when not at their defaults)."""
        found: list[tuple[tuple[str, ...], Any, str]] = []
        p = self.probabilities
        for name in OPERATOR_FIELDS:
            if name not in operators and name in p.model_fields_set and getattr(p, name) > 0:
                found.append((("probabilities", name), getattr(p, name), name))
        if "arch_mut" not in operators and "new_layer" in p.model_fields_set and p.new_layer > 0:
            found.append((("probabilities", "new_layer"), p.new_layer, "arch_mut"))
        if "params_mut" not in operators:
            for name in PARAMS_MUT_FIELDS:
                value = getattr(self, name)
                if name in self.model_fields_set and value != type(self).model_fields[name].get_default():
                    found.append(((name,), value, "params_mut"))
        return found

    def field_warnings(self) -> list[tuple[tuple[str | int, ...], str, Any]]:
        """`regrama_param_mut` and `dormant_threshold` are not acted on."""
        warnings = super().field_warnings()
        if self.regrama_param_mut:
            warnings.append((("regrama_param_mut",), "agile does not reset dormant neurons (ReGraMa); params_mut "
                                                     "adds Gaussian noise only, so this is ignored", True))
        if self.dormant_threshold is not None:
            warnings.append((("dormant_threshold",), "only used by regrama_param_mut, which agile does not "
                                                     "implement; ignored", self.dormant_threshold))
        return warnings
