"""Structural types shared by the evolutionary machinery: the agent, a selection's result, and
the selection-strategy interface that training loops call.

Selection code depends only on :class:`EvolvableAgent`, never on a concrete agent class.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, Self, TypeVar, runtime_checkable

from agile_core.hpo.lineage import Lineage


@runtime_checkable
class EvolvableAgent(Protocol):
    """What selection needs from an agent.

    Attributes:
        index: Unique id within a run; selection never reuses an index.
        fitness: Evaluation scores, latest last.
        lineage: The agent's :class:`~agile_core.hpo.lineage.Lineage` (``lineage.id == index``).
        steps: Environment steps taken so far.

    ``clone(index)`` returns an independent deep copy carrying `index`. Selection always passes
    one; it may equal the agent's own index (weights-only migration copies an agent that keeps its
    index). Selection strategies overwrite the clone's ``lineage`` (a child of the parent's lineage
    stamped with the current generation, or for an own-index copy a copy of its lineage), so
    ``clone`` need not know the generation.
    ``copy_weights_from(other)`` loads `other`'s network weights while keeping this agent's
    hyperparameters (weights-only migration).
    """

    index: int
    fitness: list[float]
    lineage: Lineage
    steps: int

    def clone(self, index: int | None = None) -> Self:
        """Deep copy with `index` as its index."""
        ...

    def copy_weights_from(self, other: Self) -> None:
        """Take `other`'s network weights, keeping own hyperparameters."""
        ...


AgentT = TypeVar("AgentT", bound=EvolvableAgent)


@dataclass(frozen=True)
class SelectionResult(Generic[AgentT]):
    """Outcome of one selection step.

    Attributes:
        elite: The fittest agent of the population that was selected from.
        population: The next generation, same size as the input.
        to_mutate: Indices of the agents in `population` that the caller must mutate next.

    Unpacks as a 3-tuple: ``elite, population, to_mutate = strategy.select(agents)``.
    """

    elite: AgentT
    population: list[AgentT]
    to_mutate: set[int] = field(default_factory=set)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.elite, self.population, self.to_mutate))

    def agents_to_mutate(self) -> list[AgentT]:
        """The agents of `population` whose index is in `to_mutate`, in population order."""
        return [agent for agent in self.population if agent.index in self.to_mutate]


@runtime_checkable
class SelectionStrategy(Protocol):
    """What the training loops call once per evolution step.

    ``select`` returns a :class:`SelectionResult`; ``generation`` counts completed ``select``
    calls; ``state_dict``/``load_state_dict`` round-trip the RNG, index counter and generation
    through JSON so a resumed run makes exactly the same choices.
    """

    generation: int

    def select(self, population: Sequence[AgentT]) -> SelectionResult[AgentT]:
        """Choose the next generation from `population`."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable resumable state."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...
