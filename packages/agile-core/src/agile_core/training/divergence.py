"""Members whose weights stopped being finite (a learning rate far too large, an exploding loss).

Their evaluation may still return a number (an argmax over NaN Q-values picks action 0), so
without a check a diverged member could win its tournament. Each generation such a member's
fitness becomes NaN, which ranks last and never makes the elite; a warning names it once. A run
whose members have all diverged stops with `TrainingDiverged`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from agile_core.algorithms.protocols import PopulationMember
from agile_core.errors import RunWarning

__all__ = ["DivergenceWatch", "TrainingDiverged", "has_finite_weights"]


class TrainingDiverged(RuntimeError):
    """Every member's weights are NaN or infinite: nothing left to select from."""


def _parameters(network: Any) -> Iterator[torch.Tensor]:
    if isinstance(network, nn.Module):
        yield from network.parameters()
    elif isinstance(network, dict):
        for module in network.values():
            yield from _parameters(module)


def has_finite_weights(agent: PopulationMember) -> bool:
    """Whether every parameter of the agent's networks is finite (one fused max-abs per network)."""
    for name in agent.network_names:
        params = [p.detach() for p in _parameters(getattr(agent, name))]
        if params and not math.isfinite(float(torch.nn.utils.get_total_norm(params, norm_type=math.inf))):
            return False
    return True


def _describe(agent: PopulationMember) -> str:
    values = agent.hyperparameters()
    shown = ", ".join(f"{k}={v:g}" for k, v in values.items() if "lr" in k and isinstance(v, int | float))
    return f"member {agent.index}" + (f" ({shown})" if shown else "")


class DivergenceWatch:
    """Checks a population after each evaluation (see the module docstring)."""

    def __init__(self) -> None:
        self._warned: set[int] = set()

    def check(self, population: Sequence[PopulationMember], fitnesses: list[float], step: int) -> list[float]:
        """`fitnesses` with NaN for each diverged member (its last `fitness` entry too); warns once
        per member; TrainingDiverged when none is left with finite weights."""
        diverged = [not has_finite_weights(agent) for agent in population]
        if not any(diverged):
            return fitnesses
        if all(diverged):
            raise TrainingDiverged(
                f"every member's weights became NaN or infinite by step {step:,} "
                f"({'; '.join(_describe(agent) for agent in population)}): check the environment's rewards and "
                "observations for NaN, or lower the learning rate or its mutation range (mutation.rl_hp_selection), "
                "or clip gradients (algorithm.max_grad_norm)")
        marked = list(fitnesses)
        for slot, agent in enumerate(population):
            if not diverged[slot]:
                continue
            marked[slot] = math.nan
            if agent.fitness:
                agent.fitness[-1] = math.nan
            if agent.index not in self._warned:
                self._warned.add(agent.index)
                warnings.warn(f"{_describe(agent)}: its weights became NaN or infinite by step {step:,}; it ranks "
                              "last and selection replaces it", RunWarning, stacklevel=2)
        return marked
