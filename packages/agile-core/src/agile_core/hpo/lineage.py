"""Agent lineage: who descends from whom, and what happened to each agent along the way.

A :class:`Lineage` travels with an agent. Its ``id`` is the agent's index (unique within a run,
never reused), ``parent_id`` the index of the agent it was cloned from, and ``history`` a list of
JSON-serialisable events such as ``{"generation": 3, "event": "mutation", "kind": "lr"}``.

A child lineage starts a fresh history (a single birth event naming the parent); the full
ancestry is recovered by following ``parent_id`` links, which :class:`FamilyTree` collects across
generations and flattens into a table a run can draw.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_LINEAGE_KEYS = ("id", "parent_id", "generation_born", "history")


def _check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return `value` as an int, rejecting bools, non-integers and values below `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


@dataclass
class Lineage:
    """Identity, parentage and event history of one agent.

    Attributes:
        id: Unique id of the agent within a run (the agent's ``index``).
        parent_id: Id of the agent this one was cloned from; None for a founder.
        generation_born: Generation (selection call) in which the agent was created; 0 for founders.
        history: Events in order, each a dict with at least ``generation`` and ``event``.
    """

    id: int
    parent_id: int | None = None
    generation_born: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.id = _check_int("Lineage.id", self.id)
        if self.parent_id is not None:
            self.parent_id = _check_int("Lineage.parent_id", self.parent_id)
        self.generation_born = _check_int(
            "Lineage.generation_born", self.generation_born, minimum=0
        )
        if not isinstance(self.history, list):
            raise ValueError(f"Lineage.history must be a list, got {type(self.history).__name__}")
        for position, entry in enumerate(self.history):
            _check_event(entry, position)

    def record(self, generation: int, event: str, **details: Any) -> dict[str, Any]:
        """Append an event (``{"generation", "event", **details}``) and return it."""
        entry: dict[str, Any] = {"generation": _check_int("generation", generation), "event": event}
        entry.update(details)
        _check_event(entry, len(self.history))
        self.history.append(entry)
        return entry

    @property
    def last_event(self) -> str | None:
        """Name of the most recent event, or None when nothing happened yet."""
        return str(self.history[-1]["event"]) if self.history else None

    def child(self, new_id: int, generation: int, event: str = "clone", **details: Any) -> Lineage:
        """Lineage of a clone of this agent: new id, this agent as parent, one birth event.

        The birth event is ``{"generation": generation, "event": event, "parent_id": self.id,
        **details}``. The parent's history is not copied; follow ``parent_id`` for ancestry.
        `new_id` should differ from ``self.id``; an equal id is tolerated (an agent's
        ``clone(index=own_index)`` may call this) and is ignored by :meth:`FamilyTree.ancestors`.
        """
        new_id = _check_int("new_id", new_id)
        born = Lineage(id=new_id, parent_id=self.id, generation_born=generation)
        born.record(generation, event, parent_id=self.id, **details)
        return born

    def copy(self) -> Lineage:
        """An independent deep copy."""
        return Lineage.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; :meth:`from_dict` inverts it."""
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "generation_born": self.generation_born,
            "history": copy.deepcopy(self.history),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Lineage:
        """Rebuild a lineage from :meth:`to_dict` output; unknown or missing keys are errors."""
        unknown = sorted(set(data) - set(_LINEAGE_KEYS))
        if unknown:
            raise ValueError(f"unknown lineage keys: {', '.join(map(str, unknown))}")
        if "id" not in data:
            raise ValueError("lineage data lacks the required key 'id'")
        return cls(
            id=data["id"],
            parent_id=data.get("parent_id"),
            generation_born=data.get("generation_born", 0),
            history=copy.deepcopy(list(data.get("history", []))),
        )


def _check_event(entry: Any, position: int) -> None:
    """Raise ValueError unless `entry` is a dict with an int generation and a str event."""
    if not isinstance(entry, dict):
        raise ValueError(f"lineage history entry {position} must be a dict, got {entry!r}")
    generation = entry.get("generation")
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise ValueError(f"lineage history entry {position} needs an integer 'generation'")
    if not isinstance(entry.get("event"), str):
        raise ValueError(f"lineage history entry {position} needs a string 'event'")


def _as_lineage(item: Any) -> Lineage:
    """Accept a Lineage or anything carrying one in ``.lineage`` (an agent)."""
    if isinstance(item, Lineage):
        return item
    lineage = getattr(item, "lineage", None)
    if isinstance(lineage, Lineage):
        return lineage
    raise TypeError(f"expected a Lineage or an object with a .lineage, got {type(item).__name__}")


def family_table(lineages: Iterable[Any]) -> list[dict[str, Any]]:
    """Flatten lineages (or agents) into rows ``{id, parent_id, generation, last_event}``.

    ``generation`` is the generation the agent was born in. When an id appears more than once
    (the same agent seen in several generations) the last occurrence wins. Rows are sorted by id.
    """
    latest: dict[int, Lineage] = {}
    for item in lineages:
        lineage = _as_lineage(item)
        latest[lineage.id] = lineage
    return [
        {
            "id": lin.id,
            "parent_id": lin.parent_id,
            "generation": lin.generation_born,
            "last_event": lin.last_event,
        }
        for _, lin in sorted(latest.items())
    ]


class FamilyTree:
    """Collects lineages seen across generations so the whole family can be tabled later.

    Call :meth:`observe` with the population (or its lineages) after each generation. Snapshots
    are deep copies, so later changes to live agents do not alter what was recorded.
    """

    def __init__(self) -> None:
        self._lineages: dict[int, Lineage] = {}
        self._last_seen: dict[int, int | None] = {}

    def observe(self, population: Iterable[Any], generation: int | None = None) -> None:
        """Record a snapshot of every lineage in `population` (agents or Lineage objects)."""
        for item in population:
            lineage = _as_lineage(item)
            self._lineages[lineage.id] = lineage.copy()
            self._last_seen[lineage.id] = generation

    def __len__(self) -> int:
        return len(self._lineages)

    def __contains__(self, lineage_id: object) -> bool:
        return lineage_id in self._lineages

    def get(self, lineage_id: int) -> Lineage:
        """The latest snapshot of one lineage (KeyError when never observed)."""
        return self._lineages[lineage_id]

    def ancestors(self, lineage_id: int) -> list[int]:
        """Ids from `lineage_id`'s parent up to the oldest observed ancestor, nearest first."""
        chain: list[int] = []
        current = self._lineages[lineage_id].parent_id
        while current is not None and current != lineage_id and current not in chain:
            chain.append(current)
            parent = self._lineages.get(current)
            current = parent.parent_id if parent is not None else None
        return chain

    def table(self) -> list[dict[str, Any]]:
        """Rows ``{id, parent_id, generation, last_event, last_seen}`` sorted by id.

        ``last_seen`` is the generation passed to the last :meth:`observe` that included the id.
        """
        rows = family_table(self._lineages.values())
        for row in rows:
            row["last_seen"] = self._last_seen.get(row["id"])
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; :meth:`from_dict` inverts it."""
        return {
            "lineages": [self._lineages[i].to_dict() for i in sorted(self._lineages)],
            "last_seen": {str(i): self._last_seen[i] for i in sorted(self._last_seen)},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FamilyTree:
        """Rebuild a tree from :meth:`to_dict` output."""
        tree = cls()
        for entry in data.get("lineages", []):
            lineage = Lineage.from_dict(entry)
            tree._lineages[lineage.id] = lineage
        tree._last_seen = {int(k): v for k, v in data.get("last_seen", {}).items()}
        return tree
