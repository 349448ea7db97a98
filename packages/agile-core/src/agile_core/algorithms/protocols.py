"""Typed contracts between training loops and the agents they run.

:class:`PopulationMember` is what every loop, reporter and evolution step reads from a member of
a population (every :class:`~agile_core.algorithms.base.EvolvableAlgorithm` satisfies it). The
``@runtime_checkable`` protocols below it are optional capabilities: a loop asks
:func:`has_capability` (``isinstance`` against the agent's class, cached: a protocol check costs
microseconds and loops ask at every step) instead of probing attributes by name. A boolean switch that an
algorithm turns on (e.g. off-policy ``supports_per_and_n_step``) is not a protocol but a
``ClassVar`` with its default on the base class that owns the concept, read as a plain attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar, runtime_checkable

from agile_core.hpo.protocols import EvolvableAgent

if TYPE_CHECKING:
    from pathlib import Path

    import torch

    from agile_core.hpo.hyperparameters import HyperparameterConfig
    from agile_core.hpo.lineage import Lineage

__all__ = ["CollectsWholeRollouts", "PopulationMember", "ReportsGenerationMetrics", "ResetsActionNoise",
           "has_capability"]

C = TypeVar("C")


class PopulationMember(EvolvableAgent, Protocol):
    """What training loops read from (and write to) a member of a population: what selection
    needs (:class:`~agile_core.hpo.protocols.EvolvableAgent`: ``clone``, ``copy_weights_from``)
    and what evaluation, reports, checkpoints and the divergence check read.

    Attributes:
        index: Unique id within a run (``lineage.id == index``).
        device: Where the member's networks live.
        hp_config: The mutable hyperparameters and their ranges (empty: none mutate).
        fitness: Evaluation scores, latest last (a loop may overwrite the last one, e.g. NaN for
            a member whose weights diverged).
        scores: Returns of the training episodes it finished.
        steps: Environment steps taken so far.
        learn_counter: Learning updates done so far.
        mut: What the last evolution step did to it (``"None"``: nothing).
        lineage: Its :class:`~agile_core.hpo.lineage.Lineage` (parent, mutation events).
        network_names: Attribute names of its networks (modules, or dicts of modules).
    """

    index: int
    device: torch.device
    hp_config: HyperparameterConfig
    fitness: list[float]
    scores: list[float]
    steps: int
    learn_counter: int
    mut: str
    lineage: Lineage

    @property
    def network_names(self) -> list[str]:
        """Attribute names of the member's networks."""
        ...

    def hyperparameters(self) -> dict[str, Any]:
        """Current values of its declared hyperparameters."""
        ...

    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        """Greedy evaluation; appends the score to `fitness` and returns it."""
        ...

    def save_checkpoint(self, path: str | Path) -> Path:
        """Write the member (architecture, weights, optimizers, state) to `path`."""
        ...


@runtime_checkable
class ResetsActionNoise(Protocol):
    """An agent that explores with a stateful noise process (DDPG, TD3, MADDPG): the loop restarts
    it at a phase start (`mask` None) and for the sub-environments whose episode ended."""

    def reset_action_noise(self, mask: Any = None) -> None:
        """Restart the noise, for every sub-environment or those where `mask` is true."""
        ...


@runtime_checkable
class CollectsWholeRollouts(Protocol):
    """An agent that learns from whole rollouts (PPO, IPPO): a generation gives it whole
    rollouts of ``rollout_steps(num_envs)`` environment steps, never part of one."""

    def rollout_steps(self, num_envs: int) -> int:
        """Environment steps of one rollout over `num_envs` sub-environments."""
        ...


@runtime_checkable
class ReportsGenerationMetrics(Protocol):
    """An agent with per-generation metrics of its own (e.g. a bandit's regret), recorded in the
    generation history beside its fitness."""

    def generation_metrics(self) -> Mapping[str, float]:
        """Name -> value of each metric for the generation just evaluated."""
        ...


_CAPABLE_CLASSES: dict[tuple[type, type], bool] = {}
"""(agent class, capability) -> whether the class has the capability's methods."""


def has_capability(agent: object, capability: type[C]) -> TypeGuard[C]:
    """Whether `agent`'s class has the methods of the runtime-checkable `capability` protocol
    (decided once per class)."""
    key = (type(agent), capability)
    found = _CAPABLE_CLASSES.get(key)
    if found is None:
        found = _CAPABLE_CLASSES[key] = issubclass(type(agent), capability)
    return found
