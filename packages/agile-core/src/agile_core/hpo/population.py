"""A population and its evolve cycle: select, mutate, remember fitness, stop at a target."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionResult, SelectionStrategy


def recent_fitness(agent: Any, window: int) -> float:
    """Mean of an agent's last `window` fitness values (-inf before any evaluation)."""
    values = agent.fitness[-window:]
    return float(np.mean(values)) if values else float("-inf")


class Population:
    """The agents being trained, with selection and mutation applied between training phases."""

    def __init__(self, agents: Sequence[Any], selection: SelectionStrategy | None = None,
                 mutations: Mutations | None = None, eval_loop: int = 1) -> None:
        if not agents:
            raise ValueError("a population needs at least one agent")
        self.agents = list(agents)
        self.selection = selection
        self.mutations = mutations
        self.eval_loop = eval_loop
        self.generation = 0
        self.fitness_history: list[dict[int, float]] = []
        self.elite: Any = None

    def __len__(self) -> int:
        return len(self.agents)

    def __iter__(self):
        return iter(self.agents)

    def record_fitness(self) -> dict[int, float]:
        """Store each agent's latest fitness under its index for this generation."""
        snapshot = {agent.index: float(agent.fitness[-1]) for agent in self.agents if agent.fitness}
        self.fitness_history.append(snapshot)
        return snapshot

    def best(self) -> Any:
        """The agent with the highest recent fitness."""
        return max(self.agents, key=lambda agent: recent_fitness(agent, self.eval_loop))

    def target_reached(self, target: float | None) -> bool:
        """True when every agent's recent fitness is at least `target`."""
        if target is None:
            return False
        return all(recent_fitness(agent, self.eval_loop) >= target for agent in self.agents)

    def evolve(self) -> list[Any]:
        """Record fitness, select and mutate (when configured); return the new agents."""
        self.record_fitness()
        self.generation += 1
        if self.selection is None or len(self.agents) < 2:
            self.elite = self.best()
            return self.agents
        result: SelectionResult = self.selection.select(self.agents)
        self.elite = result.elite
        self.agents = list(result.population)
        if self.mutations is not None:
            self.mutations.mutation(self.agents, to_mutate=result.to_mutate)
        return self.agents

    def state_dict(self) -> dict[str, Any]:
        """JSON state of the evolution (not the agents): generation, history, RNGs."""
        return {
            "generation": self.generation,
            "fitness_history": [{str(k): v for k, v in gen.items()} for gen in self.fitness_history],
            "selection": self.selection.state_dict() if self.selection is not None else None,
            "mutations": self.mutations.state_dict() if self.mutations is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` saved."""
        self.generation = int(state["generation"])
        self.fitness_history = [{int(k): float(v) for k, v in gen.items()} for gen in state["fitness_history"]]
        if self.selection is not None and state.get("selection") is not None:
            self.selection.load_state_dict(state["selection"])
        if self.mutations is not None and state.get("mutations") is not None:
            self.mutations.load_state_dict(state["mutations"])
