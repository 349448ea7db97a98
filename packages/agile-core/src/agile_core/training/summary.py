"""`summary.json`: the end-of-run record every front end writes (`agile train`, the Arena worker);
its fields are documented in docs/run-directory.md."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agile_core.algorithms.protocols import PopulationMember

__all__ = ["build_summary"]


def _finite(value: Any) -> Any:
    """`value`, or None where it is a NaN or an infinity (summary.json is strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def build_summary(population: Sequence[PopulationMember], fitnesses: list[float], target: float | None,
                  wall_time: float) -> dict[str, Any]:
    """The run's summary: each agent (fitness, history, hyperparameters, steps), the totals, the
    elite and whether every agent reached `target`. A fitness that is not a finite number (an
    environment that returned NaN rewards) is written as null, and never makes the elite."""
    total_steps = int(sum(agent.steps for agent in population))
    ranked = [f if math.isfinite(f) else -math.inf for f in map(float, fitnesses)]
    best = max(range(len(population)), key=lambda i: ranked[i])
    reached = target is not None and all(math.isfinite(f) and f >= target for f in fitnesses)
    return {
        "agents": [
            {"id": agent.index, "parent_id": agent.lineage.parent_id, "fitness": _finite(float(fitness)),
             "fitness_history": [_finite(float(v)) for v in agent.fitness],
             "hyperparameters": {k: _finite(v) for k, v in agent.hyperparameters().items()
                                 if isinstance(v, int | float | str | bool) or v is None},
             "steps": int(agent.steps), "learn_steps": int(agent.learn_counter)}
            for agent, fitness in zip(population, fitnesses, strict=True)
        ],
        "total_steps": total_steps,
        "wall_time_s": round(wall_time, 3),
        "steps_per_second": total_steps / wall_time if wall_time > 0 else 0.0,
        "elite_id": population[best].index,
        "target_reached": reached,
        "target_reached_at_step": total_steps if reached else None,
    }
