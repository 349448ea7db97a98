"""Discovery of paradigm packages through the `agile.paradigms` entry-point group.

Core never imports a paradigm package by name: each one subclasses :class:`Paradigm` in a light
module (no torch at import) and points an entry point at an instance. Discovery is lazy and
cached.
"""

from __future__ import annotations

import difflib
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from agile_core.specs._base import Spec
from agile_core.specs.algorithm import AlgorithmSpec
from agile_core.specs.env import EnvSpec
from agile_core.specs.network import NetworkSpec

if TYPE_CHECKING:
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.training.options import RunOptions

ENTRY_POINT_GROUP = "agile.paradigms"

KNOWN_ALGORITHMS: Mapping[str, str] = {
    "DQN": "agile-offpolicy",
    "RainbowDQN": "agile-offpolicy",
    "DDPG": "agile-offpolicy",
    "TD3": "agile-offpolicy",
    "PPO": "agile-onpolicy",
    "RecurrentPPO": "agile-onpolicy",
    "MADDPG": "agile-marl",
    "MATD3": "agile-marl",
    "IPPO": "agile-marl",
    "CQN": "agile-offline",
    "NeuralUCB": "agile-offline",
    "NeuralTS": "agile-offline",
    "GRPO": "agile-llm",
    "LLMPPO": "agile-llm",
    "LLMREINFORCE": "agile-llm",
    "DPO": "agile-llm",
    "SFT": "agile-llm",
}
"""Every algorithm of the agile family and the distribution that provides it."""


class Paradigm(ABC):
    """What a paradigm package contributes: its algorithms' specs, its manifest sections and the
    typed hooks the trainer calls. Subclass it once per paradigm in a light module (import no
    torch at module level: import the loop inside the methods) and point an ``agile.paradigms``
    entry point at an instance."""

    name: ClassVar[str]
    """Paradigm id, e.g. `off_policy`."""
    distribution: ClassVar[str]
    """Distribution to install for it, e.g. `agile-offpolicy`."""
    algorithms: ClassVar[tuple[type[AlgorithmSpec], ...]]
    """Spec class of each algorithm it provides."""
    env_spec: ClassVar[type[EnvSpec]]
    """Spec of the manifest's `environment` section for these algorithms."""
    network_spec: ClassVar[type[Spec]] = NetworkSpec
    """Spec of the manifest's `network` section."""
    training_fields: ClassVar[frozenset[str]] = frozenset()
    """`training` fields this paradigm reads beyond the ones every paradigm reads
    (:data:`~agile_core.specs.training.COMMON_TRAINING_FIELDS`); a manifest that sets any other is
    rejected, naming the paradigm."""
    builds_envs: ClassVar[bool] = False
    """Whether :meth:`make_env` builds the paradigm's own kind of environment (PettingZoo, data
    sets): an environment object handed to a trainer is then used as it is, not wrapped as a
    Gymnasium vector env."""
    trains_on_ray: ClassVar[bool] = False
    """Whether :meth:`make_phase` exists, so the Ray backend can spread members over workers."""

    def algorithm_names(self) -> list[str]:
        """Names of the algorithms this paradigm registers."""
        return [spec.registered_name() for spec in self.algorithms]

    @abstractmethod
    def run_loop(self, manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
                 device: str) -> tuple[list[Any], list[float]]:
        """Train `population` in `env` as the manifest says; the population and its last fitnesses."""

    def make_env(self, spec: Any, *, base_dir: str | Path | None = None, seed: int | None = None,
                 num_envs: int | None = None) -> Any:
        """The environment of the manifest's `environment` section: a Gymnasium vector env unless
        the paradigm builds its own kind (then it overrides this and sets :attr:`builds_envs`)."""
        from agile_core.environments import make_vector_env
        from agile_core.specs.env import GymEnvSpec

        if not isinstance(spec, GymEnvSpec):
            raise TypeError(f"{type(spec).__name__} environments are built by their paradigm")
        return make_vector_env(spec, base_dir="." if base_dir is None else base_dir, seed=seed, num_envs=num_envs)

    def agent_spaces(self, env: Any) -> tuple[Any, ...]:
        """The space arguments an agent of this paradigm is built from (Gymnasium: the single
        observation and action spaces of the vector env)."""
        return env.single_observation_space, env.single_action_space

    def make_population(self, manifest: TrainingManifest, env: Any, hp_config: Any,
                        device: str) -> list[Any] | None:
        """The members, for paradigms whose agents are not built from spaces (LLMs); None: the
        trainer builds `pop_size` agents of the algorithm class from :meth:`agent_spaces`."""
        return None

    def make_replay_buffer(self, spec: Any, algo_spec: AlgorithmSpec, device: Any, *, n_step: bool = False,
                           **spaces: Any) -> Any:
        """The replay buffer a `replay_buffer` section asks for (paradigms that replay experience)."""
        raise LookupError(f"paradigm '{self.name}' keeps no replay buffer")

    def make_phase(self, manifest: TrainingManifest, env: Any, device: str) -> Any:
        """One member's training phase built outside the loop: what a Ray worker runs (paradigms
        with :attr:`trains_on_ray`)."""
        raise LookupError(f"paradigm '{self.name}' cannot train on Ray workers")

    def checkpoint_evaluator(self) -> Callable[..., dict[str, Any]] | None:
        """The function `agile evaluate` calls for this paradigm's checkpoints when the generic
        evaluation (episodes in a Gymnasium env) does not fit; None: the generic one."""
        return None


class UnknownAlgorithmError(LookupError):
    """An algorithm name that no installed paradigm registers."""


_registered: dict[str, Paradigm] = {}
_discovered: dict[str, Paradigm] | None = None


def register_paradigm(paradigm: Paradigm) -> None:
    """Register a paradigm programmatically (in addition to the entry points)."""
    _registered[paradigm.name] = paradigm


def unregister_paradigm(name: str) -> None:
    """Remove a programmatically registered paradigm."""
    _registered.pop(name, None)


def refresh() -> None:
    """Forget the cached entry-point discovery (after installing a package at run time)."""
    global _discovered
    _discovered = None


def paradigms() -> dict[str, Paradigm]:
    """Every available paradigm, discovered once from the entry points plus registered ones."""
    global _discovered
    if _discovered is None:
        _discovered = {}
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            try:
                paradigm = entry.load()
            except Exception as exc:  # a broken plugin must not break the others
                warnings.warn(f"agile: could not load paradigm '{entry.name}' ({entry.value}): {exc}",
                              RuntimeWarning, stacklevel=2)
                continue
            if isinstance(paradigm, Paradigm):
                _discovered[paradigm.name] = paradigm
    return {**_discovered, **_registered}


def algorithm_names() -> list[str]:
    """Sorted names of every installed algorithm."""
    return sorted(name for paradigm in paradigms().values() for name in paradigm.algorithm_names())


def _lookup(name: str) -> tuple[Paradigm, type[AlgorithmSpec]] | None:
    for paradigm in paradigms().values():
        for spec in paradigm.algorithms:
            if spec.registered_name() == name:
                return paradigm, spec
    return None


def _distribution_installed(name: str) -> bool:
    from importlib import metadata

    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def unknown_algorithm_message(name: object) -> str:
    """Explain why `name` is not an installed algorithm and what to do about it."""
    installed = algorithm_names()
    text = str(name)
    if text in KNOWN_ALGORITHMS:
        package = KNOWN_ALGORITHMS[text]
        if _distribution_installed(package):
            return (f"algorithm '{text}' belongs to the package '{package}', which is installed but does not "
                    f"provide it yet in this version. Installed algorithms: {', '.join(installed) or 'none'}")
        return (f"algorithm '{text}' belongs to the package '{package}', which is "
                f"not installed (pip install {package})")
    candidates = {n.lower(): n for n in [*installed, *KNOWN_ALGORITHMS]}
    close = difflib.get_close_matches(text.lower(), list(candidates), n=1, cutoff=0.6)
    message = f"unknown algorithm '{text}'"
    if close:
        message += f"; did you mean '{candidates[close[0]]}'?"
    message += f" Installed algorithms: {', '.join(installed) if installed else 'none'}"
    return message


def algorithm_spec(name: str) -> type[AlgorithmSpec]:
    """The spec class registered under `name` (exact, case-sensitive)."""
    found = _lookup(name)
    if found is None:
        raise UnknownAlgorithmError(unknown_algorithm_message(name))
    return found[1]


def paradigm_of(name: str) -> Paradigm:
    """The paradigm that provides the algorithm `name`."""
    found = _lookup(name)
    if found is None:
        raise UnknownAlgorithmError(unknown_algorithm_message(name))
    return found[0]
