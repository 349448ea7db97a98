"""Selection strategies: shared bookkeeping (RNG, index counter, generation) and tournament
selection.

Conventions shared by every strategy here:

* Fitness of an agent is the mean of its last ``eval_loop`` entries of ``agent.fitness``; a NaN
  mean counts as ``-inf`` (a diverged agent loses every comparison). An agent without any fitness
  value is an error: evaluate before selecting.
* Ties in fitness are broken by population order (earlier slot ranks higher), except inside a
  tournament where they go to the contestant drawn first (i.e. at random).
* Every agent created by selection is ``parent.clone(index=new_index)`` with a fresh index from a
  counter kept above every index ever seen, so indices are never reused within a run. Selection
  sets the clone's ``lineage`` to ``parent.lineage.child(new_index, generation, ...)``.
* Selection never modifies the agents it is given; kept agents are passed through as the same
  objects, everything else is a new clone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from agile_core.hpo.protocols import AgentT, EvolvableAgent, SelectionResult

RngLike = np.random.Generator | int | None


def check_int(name: str, value: Any, minimum: int) -> int:
    """Return `value` as an int; ValueError if it is a bool, not integral, or below `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def mean_fitness(agent: EvolvableAgent, eval_loop: int) -> float:
    """Mean of the agent's last `eval_loop` fitness values (NaN becomes -inf)."""
    values = list(agent.fitness)[-eval_loop:]
    if not values:
        raise ValueError(
            f"agent {agent.index} has no fitness values; evaluate the population before selection"
        )
    score = math.fsum(float(v) for v in values) / len(values)
    return -math.inf if math.isnan(score) else score


def make_rng(rng: RngLike) -> np.random.Generator:
    """A numpy Generator from a Generator (used as is), a seed, or None (fresh entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, int | np.integer) and not isinstance(rng, bool)):
        return np.random.default_rng(rng)
    raise ValueError(f"rng must be a numpy Generator, an integer seed or None, got {rng!r}")


def _to_json(value: Any) -> Any:
    """Recursively turn numpy arrays and scalars into JSON-friendly values."""
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    return value


def _from_json(value: Any) -> Any:
    """Inverse of :func:`_to_json`."""
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return np.asarray(value["__ndarray__"], dtype=value["dtype"])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """JSON-serialisable state of a Generator's bit generator."""
    return dict(_to_json(rng.bit_generator.state))


def rng_from_state(state: Mapping[str, Any]) -> np.random.Generator:
    """A Generator whose bit generator is restored from :func:`rng_state` output."""
    name = state.get("bit_generator")
    bit_generator_cls = getattr(np.random, str(name), None)
    if not (
        isinstance(bit_generator_cls, type)
        and issubclass(bit_generator_cls, np.random.BitGenerator)
    ):
        raise ValueError(f"unknown bit generator in rng state: {name!r}")
    bit_generator = bit_generator_cls()
    bit_generator.state = _from_json(dict(state))
    return np.random.Generator(bit_generator)


class BaseSelection:
    """Bookkeeping shared by selection strategies: RNG, generation counter, fresh indices.

    Subclasses set ``kind`` and implement ``select``. ``generation`` counts completed ``select``
    calls; events recorded during a call carry the new generation number (the first call is
    generation 1, founders are generation 0).
    """

    kind: ClassVar[str] = "base"

    def __init__(self, population_size: int, eval_loop: int, rng: RngLike) -> None:
        self.population_size = check_int("population_size", population_size, 1)
        self.eval_loop = check_int("eval_loop", eval_loop, 1)
        self.rng = make_rng(rng)
        self.generation = 0
        self._next_index = 0

    @property
    def next_index(self) -> int:
        """The index the next clone will get (always above every index seen so far)."""
        return self._next_index

    def _prepare(self, population: Sequence[AgentT]) -> tuple[list[AgentT], list[float]]:
        """Validate size, index uniqueness and fitness; then advance the index counter.

        Returns the agents as a list and their fitness. Nothing changes when validation fails.
        """
        agents = list(population)
        if len(agents) != self.population_size:
            raise ValueError(
                f"{self.kind} selection expects {self.population_size} agents, got {len(agents)}"
            )
        indices = [agent.index for agent in agents]
        if len(set(indices)) != len(indices):
            duplicates = sorted({i for i in indices if indices.count(i) > 1})
            raise ValueError(f"agent indices must be unique, duplicated: {duplicates}")
        fitnesses = [mean_fitness(agent, self.eval_loop) for agent in agents]
        self._next_index = max(self._next_index, max(indices) + 1)
        return agents, fitnesses

    def _spawn(self, parent: AgentT, event: str, **details: Any) -> AgentT:
        """Clone `parent` with a fresh index and a child lineage stamped with this generation."""
        index = self._next_index
        self._next_index += 1
        child = parent.clone(index=index)
        if child.index != index:
            raise RuntimeError(
                f"agent.clone(index={index}) returned an agent with index {child.index}"
            )
        child.lineage = parent.lineage.child(index, self.generation, event=event, **details)
        return child

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: kind, generation, index counter and RNG state."""
        return {
            "kind": self.kind,
            "generation": self.generation,
            "next_index": self._next_index,
            "rng": rng_state(self.rng),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output so the next ``select`` repeats the original run.

        Only the counters and RNG are restored; the configuration comes from the constructor.
        """
        if state.get("kind") != self.kind:
            raise ValueError(
                f"state was saved by {state.get('kind')!r} selection, cannot load into {self.kind!r}"
            )
        self.generation = check_int("generation", state["generation"], 0)
        self._next_index = check_int("next_index", state["next_index"], 0)
        self.rng = rng_from_state(state["rng"])


def rank_slots(fitnesses: Sequence[float], slots: Sequence[int] | None = None) -> list[int]:
    """Slots sorted best first by fitness; ties go to the earlier slot."""
    chosen = range(len(fitnesses)) if slots is None else slots
    return sorted(chosen, key=lambda slot: (-fitnesses[slot], slot))


class TournamentSelection(BaseSelection):
    """Tournament selection with optional elitism.

    Each call: the elite is the fittest agent. With ``elitism`` it keeps slot 0 of the new
    population as the *same object* (not a copy, so optimiser state and buffers survive; it is
    not in ``to_mutate``). Every other slot holds a clone (fresh index) of the winner of a
    tournament: ``tournament_size`` agents drawn without replacement from the whole population,
    the fittest wins. All clones are listed in ``to_mutate``. Without elitism the elite is still
    reported but every slot is a tournament clone.

    Args:
        tournament_size: Contestants per tournament, 2 <= tournament_size <= population_size.
        elitism: Keep the best agent unchanged.
        population_size: Number of agents selected from and returned.
        eval_loop: How many of the latest fitness values are averaged.
        rng: numpy Generator, integer seed or None.
    """

    kind: ClassVar[str] = "tournament"

    def __init__(
        self,
        tournament_size: int,
        elitism: bool,
        population_size: int,
        eval_loop: int = 1,
        rng: RngLike = None,
    ) -> None:
        population_size = check_int("population_size", population_size, 2)
        self.tournament_size = check_int("tournament_size", tournament_size, 2)
        if self.tournament_size > population_size:
            raise ValueError(
                f"tournament_size ({self.tournament_size}) must be <= population_size "
                f"({population_size}): contestants are drawn without replacement"
            )
        if not isinstance(elitism, bool | np.bool_):
            raise ValueError(f"elitism must be a bool, got {elitism!r}")
        self.elitism = bool(elitism)
        super().__init__(population_size, eval_loop, rng)

    def select(self, population: Sequence[AgentT]) -> SelectionResult[AgentT]:
        """Return the elite, the next generation and the indices of the clones to mutate."""
        agents, fitnesses = self._prepare(population)
        self.generation += 1
        elite = agents[rank_slots(fitnesses)[0]]
        new_population: list[AgentT] = [elite] if self.elitism else []
        to_mutate: set[int] = set()
        while len(new_population) < self.population_size:
            draw = self.rng.choice(len(agents), size=self.tournament_size, replace=False)
            winner = agents[max(draw.tolist(), key=lambda slot: fitnesses[slot])]
            child = self._spawn(winner, "clone", selection="tournament")
            new_population.append(child)
            to_mutate.add(child.index)
        return SelectionResult(elite=elite, population=new_population, to_mutate=to_mutate)
