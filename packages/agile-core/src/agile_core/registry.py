"""Discovery of paradigm packages through the `agile.paradigms` entry-point group.

Core never imports a paradigm package by name: each one declares a `Paradigm` in a light
module (no torch at import) and points an entry point at it. Discovery is lazy and cached.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from agile_core.specs.algorithm import AlgorithmSpec
from agile_core.specs.env import EnvSpec
from agile_core.specs.network import NetworkSpec

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


@dataclass(frozen=True)
class Paradigm:
    """What a paradigm package contributes: algorithm specs, its env spec, its training loop."""

    name: str
    """Paradigm id, e.g. `off_policy`."""
    distribution: str
    """Distribution to install for it, e.g. `agile-offpolicy`."""
    algorithms: tuple[type[AlgorithmSpec], ...]
    """Spec class of each algorithm it provides."""
    env_spec: type[EnvSpec]
    """Spec of the manifest's `environment` section for these algorithms."""
    network_spec: type[Any] = NetworkSpec
    """Spec of the manifest's `network` section."""
    hooks: Mapping[str, str] = field(default_factory=dict)
    """Lazily imported `module:attr` references: `run_loop`, `make_env`, `buffer_factory`..."""
    training_fields: frozenset[str] = frozenset()
    """`training` fields this paradigm reads beyond the ones every paradigm reads
    (:data:`~agile_core.specs.training.COMMON_TRAINING_FIELDS`); a manifest that sets any other is
    rejected, naming the paradigm."""

    def algorithm_names(self) -> list[str]:
        """Names of the algorithms this paradigm registers."""
        return [spec.registered_name() for spec in self.algorithms]

    def load_attr(self, hook: str) -> Any:
        """Import and return the object a hook names; a clear error when it is missing."""
        if hook not in self.hooks:
            raise LookupError(f"paradigm '{self.name}' provides no '{hook}'")
        module_name, _, attr = self.hooks[hook].partition(":")
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
        return target


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
