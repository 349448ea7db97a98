"""`Mutations`: one seeded mutation operator per agent per generation."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agile_core.hpo.selection import rng_from_state, rng_state
from agile_core.specs.mutation import MutationSpec

OPERATORS = ("no_mut", "arch_mut", "params_mut", "act_mut", "rl_hp_mut")

AMPLIFIED_SHARE = 0.05
"""Share of the perturbed entries that fall in the amplified band (when it is on)."""
RESET_SHARE = 0.05
"""Share of the perturbed entries that fall in the random-reset band (when it is on)."""
AMPLIFIED_SCALE = 10.0
"""Noise of the amplified band: this many times an entry's own magnitude."""


@dataclass(frozen=True)
class NoiseBands:
    """Optional bands of the parameter-noise mutation besides the normal one (manifest fields
    `mutation.amplified_gauss_param_mut` and `mutation.random_reset_param_mut`).

    With either on, each perturbed entry falls in a band: amplified (noise at ``10 x`` its own
    magnitude, share :data:`AMPLIFIED_SHARE`), random reset (replaced by a ``N(0, 1)`` draw, share
    :data:`RESET_SHARE`) or normal (the rest). An entry in a band that is off keeps its value (the
    band's share is not handed to the others). With both off every perturbed entry is normal.
    """

    amplified: bool = False
    random_reset: bool = False


class Mutations:
    """Mutate agents with the seed's operators, each chosen with its (normalised) probability.

    `no_mut` leaves the agent alone; `arch_mut` changes a layer (probability `new_layer_prob`) or
    nodes of the policy network and replays the change on every network that follows it;
    `params_mut` adds Gaussian noise scaled by `mutation_sd`; `act_mut` swaps the activation;
    `rl_hp_mut` grows or shrinks one hyperparameter of the agent's `hp_config` within its range.
    Each agent records what happened in `agent.mut` and its lineage.
    """

    def __init__(self, no_mutation: float = 0.4, architecture: float = 0.2, new_layer_prob: float = 0.2,
                 parameters: float = 0.2, activation: float = 0.0, rl_hp: float = 0.2,
                 mutation_sd: float = 0.1, rand_seed: int | None = None, *,
                 bands: NoiseBands | None = None, mutate_elite: bool = False) -> None:
        weights = np.array([no_mutation, architecture, parameters, activation, rl_hp], dtype=float)
        if (weights < 0).any() or weights.sum() <= 0:
            raise ValueError("mutation probabilities must be >= 0 with a positive sum")
        if not 0.0 <= new_layer_prob <= 1.0:
            raise ValueError(f"new_layer_prob must lie in [0, 1], got {new_layer_prob}")
        self.probabilities = weights / weights.sum()
        self.new_layer_prob = new_layer_prob
        self.mutation_sd = mutation_sd
        self.bands = bands or NoiseBands()
        self.mutate_elite = bool(mutate_elite)
        self.rng = np.random.default_rng(rand_seed)
        self.generation = 0

    @classmethod
    def from_spec(cls, spec: MutationSpec) -> Mutations:
        """Build from a manifest's `mutation` section."""
        p = spec.probabilities
        return cls(no_mutation=p.no_mut, architecture=p.arch_mut, new_layer_prob=p.new_layer,
                   parameters=p.params_mut, activation=p.act_mut, rl_hp=p.rl_hp_mut,
                   mutation_sd=spec.mutation_sd, rand_seed=spec.rand_seed,
                   bands=NoiseBands(amplified=spec.amplified_gauss_param_mut,
                                    random_reset=spec.random_reset_param_mut),
                   mutate_elite=spec.mutate_elite)

    def mutation(self, population: Sequence[Any], to_mutate: Iterable[int] | None = None) -> list[Any]:
        """Mutate the agents whose index is in `to_mutate` (all when None), in place; return the population."""
        self.generation += 1
        chosen = None if to_mutate is None else set(to_mutate)
        for agent in population:
            if chosen is not None and agent.index not in chosen:
                agent.mut = "None"
                continue
            operator = OPERATORS[int(self.rng.choice(len(OPERATORS), p=self.probabilities))]
            details = self.apply(agent, operator)
            agent.mut = describe(operator, details)
            agent.lineage.record(self.generation, "mutation", operator=operator, **_jsonable(details))
        return list(population)

    def apply(self, agent: Any, operator: str) -> dict[str, Any]:
        """Apply one named operator to `agent`; return what changed (empty when nothing could)."""
        if operator == "arch_mut":
            return agent.mutate_architecture(self.rng, self.new_layer_prob) or {}
        if operator == "act_mut":
            return agent.mutate_activation(self.rng) or {}
        if operator == "params_mut":
            return agent.mutate_parameters(self.rng, self.mutation_sd, bands=self.bands) or {}
        if operator == "rl_hp_mut":
            return agent.mutate_hyperparameter(self.rng) or {}
        if operator == "no_mut":
            return {}
        raise ValueError(f"unknown mutation operator {operator!r}; choose from {OPERATORS}")

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (RNG and generation) for exact resumption."""
        return {"generation": self.generation, "rng": rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state saved by `state_dict`."""
        self.generation = int(state["generation"])
        self.rng = rng_from_state(state["rng"])


def describe(operator: str, details: dict[str, Any]) -> str:
    """A short human-readable description of a mutation, for tables and logs."""
    if operator == "no_mut" or not details:
        return "None"
    if operator == "rl_hp_mut":
        return f"{details['hyperparameter']} {_short(details['old'])}->{_short(details['new'])}"
    if operator in ("arch_mut", "act_mut"):
        return str(details.get("mutation", operator))
    return "params"


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _jsonable(details: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in details.items():
        if isinstance(value, dict):
            out[key] = _jsonable(value)
        elif isinstance(value, list | tuple):
            out[key] = [v if isinstance(v, int | float | str | bool) or v is None else str(v) for v in value]
        elif isinstance(value, int | float | str | bool) or value is None:
            out[key] = value
        else:
            out[key] = str(value)
    return out
