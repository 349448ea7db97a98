"""Compact, aligned per-generation population table for the console."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ._format import format_number

MAX_HEADER = 12
MAX_MUTATION = 48


@dataclass(frozen=True)
class GenerationRow:
    """One agent of a generation: id, fitness, key hyperparameters and last mutation."""

    agent_id: int | str
    fitness: float | None
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    mutation: str | None = None


def _as_row(row: GenerationRow | Mapping[str, Any]) -> GenerationRow:
    if isinstance(row, GenerationRow):
        return row
    return GenerationRow(
        agent_id=row["agent_id"],
        fitness=row.get("fitness"),
        hyperparameters=dict(row.get("hyperparameters") or {}),
        mutation=row.get("mutation"),
    )


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _cell(value: Any) -> str:
    if isinstance(value, bool | int | float) or value is None:
        return format_number(value)
    return str(value)


def format_generation_table(
    rows: Iterable[GenerationRow | Mapping[str, Any]],
    *,
    hyperparameters: Sequence[str] | None = None,
    generation: int | None = None,
) -> str:
    """Render rows as an aligned table; the best fitness is marked with ``*``.

    Rows are :class:`GenerationRow` or mappings with keys ``agent_id``,
    ``fitness``, ``hyperparameters`` and ``mutation``.  ``hyperparameters``
    selects and orders the hyperparameter columns (default: every name, in order
    of first appearance).  Numbers are right-aligned and compact (``3.2e-04``).
    """
    items = [_as_row(r) for r in rows]
    if hyperparameters is None:
        hp_names = list(dict.fromkeys(name for r in items for name in r.hyperparameters))
    else:
        hp_names = list(hyperparameters)
    fitnesses = [r.fitness for r in items if r.fitness is not None and not math.isnan(r.fitness)]
    best = max(fitnesses) if fitnesses else None

    header = ["agent", "fitness", *(_shorten(n, MAX_HEADER) for n in hp_names), "mutation"]
    body: list[list[str]] = []
    for r in items:
        mark = "*" if best is not None and r.fitness == best else " "
        cells = [f"{mark}{r.agent_id}", format_number(r.fitness)]
        cells += [
            _cell(r.hyperparameters.get(n)) if n in r.hyperparameters else "-" for n in hp_names
        ]
        cells.append(_shorten(r.mutation or "-", MAX_MUTATION))
        body.append(cells)

    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    last = len(header) - 1

    def render(cells: list[str]) -> str:
        parts = [
            cell.ljust(widths[i]) if i in (0, last) else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    lines = [render(header), "  ".join("-" * w for w in widths)]
    lines += [render(cells) for cells in body]
    if generation is not None:
        lines.insert(0, f"generation {generation}")
    return "\n".join(lines)


def print_generation_table(
    rows: Iterable[GenerationRow | Mapping[str, Any]],
    *,
    hyperparameters: Sequence[str] | None = None,
    generation: int | None = None,
    stream: TextIO | None = None,
) -> None:
    """Print :func:`format_generation_table` to ``stream`` (default stdout)."""
    out = stream if stream is not None else sys.stdout
    out.write(
        format_generation_table(rows, hyperparameters=hyperparameters, generation=generation) + "\n"
    )
    out.flush()
