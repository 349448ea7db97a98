"""One generation of evolutionary HPO as the training loops run it: evaluate, check the target,
select, mutate."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agile_core.algorithms.protocols import PopulationMember
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy


def resolve_selection_strategy(selection_strategy: SelectionStrategy | None, tournament: SelectionStrategy | None,
                               *, stacklevel: int = 3) -> SelectionStrategy | None:
    """The selection strategy to use, accepting the deprecated ``tournament`` alias.

    Passing ``tournament`` warns (DeprecationWarning); passing both, as different objects, is an
    error rather than a silent choice.
    """
    if tournament is None:
        return selection_strategy
    warnings.warn("`tournament` is deprecated; pass the same object as `selection_strategy`",
                  DeprecationWarning, stacklevel=stacklevel)
    if selection_strategy is not None and selection_strategy is not tournament:
        raise ValueError("got both `selection_strategy` and its deprecated alias `tournament`; pass only "
                         "`selection_strategy`")
    return tournament


def evaluate_population(population: Sequence[PopulationMember], env: Any, *, swap_channels: bool = False,
                        max_steps: int | None = None, loop: int = 1) -> list[float]:
    """Call every agent's ``test`` (which appends to its ``fitness``); return the scores in order."""
    return [float(agent.test(env, swap_channels=swap_channels, max_steps=max_steps, loop=loop))
            for agent in population]


def target_reached(fitnesses: Sequence[float], target: float | None) -> bool:
    """True when a `target` is set and every fitness (NaN never counts) reaches it."""
    if target is None or not fitnesses:
        return False
    return all(not math.isnan(f) and f >= target for f in fitnesses)


@dataclass
class EvolutionResult:
    """What one evolve step produced.

    Attributes:
        population: The next generation (same size and slot order as the selection returned).
        elite: The fittest agent of the evaluated population.
        mutations: Agent index -> description of its mutation (only agents that were mutated).
        parents: Agent index -> parent index, for every new agent created by selection.
    """

    population: list[PopulationMember]
    elite: Any
    mutations: dict[int, str] = field(default_factory=dict)
    parents: dict[int, int] = field(default_factory=dict)


def evolve_population(population: Sequence[PopulationMember], selection: SelectionStrategy | None,
                      mutation: Mutations | None) -> EvolutionResult:
    """Select (when `selection` is given) and mutate (when `mutation` is given).

    Every agent must have been evaluated (``fitness`` non-empty). Without selection the
    population passes through and `mutation`, if any, applies to every agent; with selection it
    applies to the clones the selection lists in ``to_mutate``. Selection never reuses indices,
    so new agents are recognised by index.
    """
    agents = list(population)
    old = {agent.index for agent in agents}
    if selection is None:
        elite = max(agents, key=lambda agent: agent.fitness[-1])
        to_mutate: set[int] | None = None
    else:
        result = selection.select(agents)
        elite, agents, to_mutate = result.elite, list(result.population), set(result.to_mutate)
        if mutation is not None and mutation.mutate_elite:
            to_mutate |= {agent.index for agent in agents}
    mutated: dict[int, str] = {}
    if mutation is not None:
        mutation.mutation(agents, to_mutate=to_mutate)
        mutated = {agent.index: agent.mut for agent in agents
                   if (to_mutate is None or agent.index in to_mutate)}
    parents = {agent.index: agent.lineage.parent_id for agent in agents
               if agent.index not in old and agent.lineage.parent_id is not None}
    return EvolutionResult(agents, elite, mutated, parents)
