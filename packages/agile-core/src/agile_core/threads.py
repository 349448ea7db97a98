"""How many threads torch computes with in one training process.

torch starts with one intra-op thread per core. For the small networks of RL (a few hundred
thousand parameters, batches of a few hundred rows) every operation is too small to split: the
extra threads only synchronise, and on a busy machine they oversubscribe the cores (a small
MADDPG run: 134 s with torch's default on 2 busy cores, 27 s with one thread). Large members
(LLM fine-tuning, big image encoders) do profit from threads. So a training process chooses:

1. an explicit request (``agile train --threads N``, ``LocalTrainer.train(threads=N)``);
2. else ``AGILE_NUM_THREADS``;
3. else, when the user set ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``, what torch took from it;
4. else by the size of one member: one thread below :data:`LARGE_MEMBER_PARAMETERS`, otherwise
   the cores this process may use divided among the processes sharing them (data-parallel ranks,
   Ray workers get their own CPUs).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

LARGE_MEMBER_PARAMETERS = 5_000_000
"""Parameters of one member (frozen ones included: they cost compute too) from which threads pay."""

AGILE_VARIABLE = "AGILE_NUM_THREADS"
USER_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS tells it, else all)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def member_parameters(population: Iterable[Any]) -> int:
    """Parameters of the largest member: every tensor of the torch modules it holds (shared ones
    once per member)."""
    import torch

    largest = 0
    for agent in population:
        seen: set[int] = set()
        total = 0
        for value in vars(agent).values():
            modules = value.values() if isinstance(value, dict) else [value]
            for module in modules:
                if isinstance(module, torch.nn.Module):
                    for parameter in module.parameters():
                        if id(parameter) not in seen:
                            seen.add(id(parameter))
                            total += parameter.numel()
        largest = max(largest, total)
    return largest


def choose_threads(parameters: int, processes: int = 1, cores: int | None = None) -> int:
    """Intra-op threads for a process training members of `parameters` parameters, one of
    `processes` processes sharing `cores` cores (default: this process's)."""
    share = max(1, (cores if cores is not None else usable_cores()) // max(1, processes))
    return 1 if parameters < LARGE_MEMBER_PARAMETERS else share


def _positive(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {text!r}")
    return value


def resolve_threads(population: Iterable[Any], requested: int | None = None, processes: int = 1,
                    cores: int | None = None) -> int | None:
    """The thread count rule 1-4 of this module gives, or None for rule 3 (leave torch as the
    user's variables set it)."""
    if requested is not None:
        return _positive("threads", str(requested))
    if os.environ.get(AGILE_VARIABLE):
        return _positive(AGILE_VARIABLE, os.environ[AGILE_VARIABLE])
    if any(os.environ.get(name) for name in USER_VARIABLES):
        return None
    return choose_threads(member_parameters(population), processes, cores)


def configure_threads(population: Iterable[Any], requested: int | None = None, processes: int = 1) -> int:
    """Set torch's intra-op threads for this process by :func:`resolve_threads`; returns the count."""
    import torch

    chosen = resolve_threads(population, requested, processes)
    if chosen is not None and chosen != torch.get_num_threads():
        torch.set_num_threads(chosen)
    return torch.get_num_threads()
