"""Multiple-frequencies population-based training (MF-PBT; Doulazmi et al., 2025).

Plain PBT is greedy: it keeps whatever looks best over one short evaluation window. MF-PBT splits
the population into subpopulations that evolve at different frequencies, so some lines of agents
are judged over long horizons, and lets good agents flow between subpopulations through an
asymmetric migration.

Choices made here where the idea leaves room (all deterministic given the RNG):

* **Layout is positional.** Slot ``j`` of the population belongs to subpopulation ``j // S``
  (``S`` agents each); the returned population keeps that layout.
* **Schedule.** On the ``c``-th call of :meth:`MultiFrequencySelection.select` (``c`` starts at 1),
  subpopulation ``i`` evolves iff ``c % ratios[i] == 0``. Non-evolving subpopulations pass through.
* **Brackets.** An evolving subpopulation is ranked by fitness (ties: earlier slot first) into
  winners, survivors, open-for-migration and losers, best to worst.
* **Exploit.** Each loser slot receives a clone (fresh index) of a winner drawn uniformly at
  random with the RNG. These clones, and only these, are returned in ``to_mutate``.
* **Migration.** Candidates are all agents of the *other* subpopulations, as they were at the
  start of the call (so the order in which subpopulations are processed does not matter). The
  open agents, weakest first, are offered the candidates, fittest first; an open agent is replaced
  only by a strictly fitter candidate, and the pass stops at the first refusal. The open slots
  thus end with the fittest agents of the union of open agents and candidates. A candidate from a
  subpopulation with a smaller ratio (it evolves more often) donates only its weights: the open
  agent is cloned with its *own* index, then ``copy_weights_from(candidate)``, keeping its
  hyperparameters and lineage (a ``migration`` event is recorded). A candidate from a subpopulation
  with an equal or larger ratio migrates whole: a clone with a fresh index. Migrants are not mutated.
* **Elite.** The fittest agent of the whole population (ties: earlier slot). It is a winner of its
  subpopulation, so it is always kept as the same object.
* Fitness uses the last ``eval_loop`` scores (see :mod:`agile_core.hpo.selection`); the fitness
  history of a weights-only migrant is left as it was (it refers to its previous weights until the
  next evaluation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from agile_core.hpo.protocols import AgentT, SelectionResult
from agile_core.hpo.selection import BaseSelection, RngLike, check_int, rank_slots

COUNT_NAMES = ("n_winners", "n_survivors", "n_open_for_migration", "n_losers")


def default_ratios(n_subpopulations: int) -> list[int]:
    """Default evolution-frequency ratios: [1, 5, 10, 15, ...] (n_subpopulations entries)."""
    return [1] + [5 * k for k in range(1, n_subpopulations)]


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)


def resolve_multi_frequency_layout(
    pop_size: int,
    n_subpopulations: int,
    n_winners: int | None = None,
    n_survivors: int | None = None,
    n_open_for_migration: int | None = None,
    n_losers: int | None = None,
    ratios: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Fill in defaults for an MF-PBT layout and check it; ValueError with a precise message if bad.

    With ``S = pop_size // n_subpopulations``, counts left as None default to: winners
    ``round(S/4)`` (half rounds up), survivors 0, open-for-migration ``round(S/4)``, losers whatever
    remains. Ratios default to [1, 5, 10, 15, ...].

    Returns a dict with keys ``pop_size``, ``n_subpopulations``, ``subpopulation_size``,
    ``n_winners``, ``n_survivors``, ``n_open_for_migration``, ``n_losers`` and ``ratios`` (a list).
    Messages contain no braces, so callers can embed them in templated errors.
    """
    pop_size = check_int("pop_size", pop_size, 0)
    n_subpopulations = check_int("n_subpopulations", n_subpopulations, 1)
    if pop_size < 6:
        raise ValueError(f"multi-frequency selection needs pop_size >= 6, got {pop_size}")
    if pop_size % n_subpopulations != 0:
        raise ValueError(
            f"pop_size ({pop_size}) must be divisible by n_subpopulations ({n_subpopulations})"
        )
    size = pop_size // n_subpopulations
    if size < 3:
        raise ValueError(
            f"each subpopulation needs at least 3 agents, but pop_size {pop_size} split into "
            f"{n_subpopulations} subpopulations gives {size}"
        )
    given = dict(
        zip(COUNT_NAMES, (n_winners, n_survivors, n_open_for_migration, n_losers), strict=True)
    )
    counts = {name: None if v is None else check_int(name, v, 0) for name, v in given.items()}
    quarter = _round_half_up(size / 4)
    defaults = {"n_winners": quarter, "n_survivors": 0, "n_open_for_migration": quarter}
    for name, default in defaults.items():
        if counts[name] is None:
            counts[name] = default
    if counts["n_losers"] is None:
        others = {name: int(counts[name] or 0) for name in defaults}
        remainder = size - sum(others.values())
        if remainder < 1:
            spent = ", ".join(f"{name} {value}" for name, value in others.items())
            raise ValueError(
                f"n_losers must be >= 1, but {spent} leave {remainder} of the subpopulation "
                f"size {size}"
            )
        counts["n_losers"] = remainder
    resolved = {name: int(counts[name] or 0) for name in COUNT_NAMES}
    total = sum(resolved.values())
    if total != size:
        terms = " + ".join(str(resolved[name]) for name in COUNT_NAMES)
        raise ValueError(
            "n_winners + n_survivors + n_open_for_migration + n_losers must equal the "
            f"subpopulation size {size}, got {terms} = {total}"
        )
    if resolved["n_winners"] < 1:
        raise ValueError("n_winners must be >= 1: losers are replaced by clones of winners")
    if resolved["n_losers"] < 1:
        raise ValueError("n_losers must be >= 1: every evolution replaces at least one agent")
    resolved_ratios = _resolve_ratios(ratios, n_subpopulations)
    return {
        "pop_size": pop_size,
        "n_subpopulations": n_subpopulations,
        "subpopulation_size": size,
        **resolved,
        "ratios": resolved_ratios,
    }


def _resolve_ratios(ratios: Sequence[int] | None, n_subpopulations: int) -> list[int]:
    if ratios is None:
        return default_ratios(n_subpopulations)
    ratios = list(ratios)
    if len(ratios) != n_subpopulations:
        raise ValueError(
            f"evolution_frequency_ratios has {len(ratios)} entries but n_subpopulations is "
            f"{n_subpopulations}"
        )
    return [check_int(f"evolution_frequency_ratios[{i}]", r, 1) for i, r in enumerate(ratios)]


class MultiFrequencySelection(BaseSelection):
    """MF-PBT selection: subpopulations evolving at different frequencies with asymmetric migration.

    See the module docstring for the exact rules. ``select`` returns a
    :class:`~agile_core.hpo.protocols.SelectionResult` whose ``to_mutate`` holds the indices of the
    loser-replacing clones created in this call (empty when no subpopulation evolved).

    Args:
        population_size: Total agents (>= 6, divisible by ``n_subpopulations``).
        n_subpopulations: Number of subpopulations.
        evolution_frequency_ratios: Subpopulation i evolves every ratios[i] calls.
        n_winners, n_survivors, n_open_for_migration, n_losers: Brackets per subpopulation
            (None: defaults of :func:`resolve_multi_frequency_layout`).
        eval_loop: How many of the latest fitness values are averaged.
        rng: numpy Generator, integer seed or None.
    """

    kind: ClassVar[str] = "multi_frequency"

    def __init__(
        self,
        population_size: int,
        n_subpopulations: int,
        evolution_frequency_ratios: Sequence[int] | None = None,
        n_winners: int | None = None,
        n_survivors: int | None = None,
        n_open_for_migration: int | None = None,
        n_losers: int | None = None,
        eval_loop: int = 1,
        rng: RngLike = None,
    ) -> None:
        layout = resolve_multi_frequency_layout(
            pop_size=population_size,
            n_subpopulations=n_subpopulations,
            n_winners=n_winners,
            n_survivors=n_survivors,
            n_open_for_migration=n_open_for_migration,
            n_losers=n_losers,
            ratios=evolution_frequency_ratios,
        )
        super().__init__(layout["pop_size"], eval_loop, rng)
        self._layout = layout
        self.n_subpopulations: int = layout["n_subpopulations"]
        self.subpopulation_size: int = layout["subpopulation_size"]
        self.n_winners: int = layout["n_winners"]
        self.n_survivors: int = layout["n_survivors"]
        self.n_open_for_migration: int = layout["n_open_for_migration"]
        self.n_losers: int = layout["n_losers"]
        self.ratios: list[int] = list(layout["ratios"])

    @property
    def layout(self) -> dict[str, Any]:
        """The resolved layout (a copy of :func:`resolve_multi_frequency_layout`'s result)."""
        return {**self._layout, "ratios": list(self.ratios)}

    def subpopulation_of(self, slot: int) -> int:
        """Subpopulation owning population slot `slot`."""
        return slot // self.subpopulation_size

    def subpopulation_slots(self, subpopulation: int) -> range:
        """Population slots of one subpopulation."""
        start = subpopulation * self.subpopulation_size
        return range(start, start + self.subpopulation_size)

    def evolving_subpopulations(self, call: int | None = None) -> list[int]:
        """Subpopulations that evolve on the `call`-th select (default: the next call)."""
        call = self.generation + 1 if call is None else check_int("call", call, 1)
        return [i for i, ratio in enumerate(self.ratios) if call % ratio == 0]

    def brackets(self, ranked: Sequence[int]) -> dict[str, list[int]]:
        """Split slots ranked best-first into winners / survivors / open / losers."""
        w, s, o = self.n_winners, self.n_survivors, self.n_open_for_migration
        return {
            "winners": list(ranked[:w]),
            "survivors": list(ranked[w : w + s]),
            "open_for_migration": list(ranked[w + s : w + s + o]),
            "losers": list(ranked[w + s + o :]),
        }

    def select(self, population: Sequence[AgentT]) -> SelectionResult[AgentT]:
        """Evolve the subpopulations due on this call; return elite, population and clones to mutate."""
        agents, fitnesses = self._prepare(population)
        evolving = self.evolving_subpopulations()
        self.generation += 1
        elite = agents[rank_slots(fitnesses)[0]]
        new_population = list(agents)
        to_mutate: set[int] = set()
        for subpopulation in evolving:
            groups = self.brackets(rank_slots(fitnesses, self.subpopulation_slots(subpopulation)))
            for slot in groups["losers"]:
                parent_slot = groups["winners"][int(self.rng.integers(len(groups["winners"])))]
                child = self._spawn(
                    agents[parent_slot],
                    "clone",
                    selection="multi_frequency",
                    subpopulation=subpopulation,
                    replaced=agents[slot].index,
                )
                new_population[slot] = child
                to_mutate.add(child.index)
            self._migrate(
                subpopulation, groups["open_for_migration"], agents, fitnesses, new_population
            )
        return SelectionResult(elite=elite, population=new_population, to_mutate=to_mutate)

    def _migrate(
        self,
        subpopulation: int,
        open_slots: Sequence[int],
        agents: Sequence[AgentT],
        fitnesses: Sequence[float],
        new_population: list[AgentT],
    ) -> None:
        """Replace open agents of `subpopulation` by fitter agents from other subpopulations."""
        foreign = [
            slot for slot in range(len(agents)) if self.subpopulation_of(slot) != subpopulation
        ]
        candidates = rank_slots(fitnesses, foreign)
        weakest_first = list(reversed(list(open_slots)))
        for local_slot, source_slot in zip(weakest_first, candidates, strict=False):
            if not fitnesses[source_slot] > fitnesses[local_slot]:
                break
            source_sub = self.subpopulation_of(source_slot)
            local, source = agents[local_slot], agents[source_slot]
            details = {"from_subpopulation": source_sub, "subpopulation": subpopulation}
            if self.ratios[source_sub] < self.ratios[subpopulation]:
                migrant = local.clone(index=local.index)
                migrant.copy_weights_from(source)
                migrant.lineage = local.lineage.copy()
                migrant.lineage.record(
                    self.generation, "migration", kind="weights", source_id=source.index, **details
                )
            else:
                migrant = self._spawn(
                    source, "migration", kind="whole", replaced=local.index, **details
                )
            new_population[local_slot] = migrant
