"""Base class of every evolvable network: config round-trip, cloning and named mutations.

A mutation is a method tagged with :func:`mutation`. It takes its concrete parameters as
optional keyword arguments, samples the missing ones from a numpy ``Generator``, applies the
change and returns the fully resolved keyword arguments, so the very same change can be replayed
on another network of the same shape (a critic, a target network)::

    change = actor.mutate("encoder.add_node", rng)      # {"hidden_layer": 0, "numb_new_nodes": 32}
    target.mutate("encoder.add_node", **change)         # identical architecture change

Composite modules expose their parts' mutations under a dotted prefix (``"encoder.add_node"``,
``"head.add_layer"``); a prefix may stand for several parts mutated in lockstep.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self, TypeVar, cast

import numpy as np
import torch
from torch import nn

MutationKind = Literal["layer", "node", "activation"]
"""Kind of a mutation: the mutation engine chooses between layer and node changes by probability;
activation changes are requested separately."""

MUTATION_KINDS: tuple[str, ...] = ("layer", "node", "activation")

_MUTATION_ATTR = "_agile_mutation"
_REGISTRY: dict[str, type[EvolvableModule]] = {}

F = TypeVar("F", bound=Callable[..., dict[str, Any]])


class MutationError(ValueError):
    """A mutation that is unknown, unavailable now (at a bound), or given out-of-bounds values."""


@dataclass(frozen=True)
class MutationInfo:
    """What the :func:`mutation` decorator records about a method."""

    kind: str
    available: Callable[[Any], bool]


def mutation(kind: MutationKind, available: Callable[[Any], bool] | None = None) -> Callable[[F], F]:
    """Tag a method as a mutation of `kind`; `available(self)` says whether it may run now.

    The wrapped method refuses to run (MutationError) when unavailable and receives a numpy
    Generator as `rng` (a fresh unseeded one when the caller gives none).
    """
    if kind not in MUTATION_KINDS:
        raise ValueError(f"mutation kind must be one of {MUTATION_KINDS}, got {kind!r}")
    info = MutationInfo(kind, available or (lambda self: True))

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, *args: Any, rng: np.random.Generator | None = None, **kwargs: Any) -> dict[str, Any]:
            if not info.available(self):
                raise MutationError(f"{type(self).__name__}.{fn.__name__} is not available now (a bound is reached)")
            resolved = fn(self, *args, rng=np.random.default_rng() if rng is None else rng, **kwargs)
            if isinstance(self, nn.Module):
                self.train(self.training)  # new submodules follow the module's train/eval mode
            return resolved

        setattr(wrapper, _MUTATION_ATTR, info)
        return cast(F, wrapper)

    return decorate


def torch_generator(rng: np.random.Generator) -> torch.Generator:
    """A CPU torch Generator seeded from `rng`, for reproducible initial values of new weights."""
    generator = torch.Generator()
    generator.manual_seed(int(rng.integers(0, 2**62)))
    return generator


class EvolvableModule(nn.Module):
    """A torch module whose architecture can be serialised, rebuilt, cloned and mutated.

    Subclasses implement ``_config_body()`` (JSON-serialisable constructor data) and may override
    ``_build_from_config(body)`` (default: ``cls(**body)``) and ``_delegates()`` (named parts whose
    mutations are exposed under a dotted prefix).
    """

    _mutations: ClassVar[dict[str, MutationInfo]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls
        found: dict[str, MutationInfo] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                info = getattr(value, _MUTATION_ATTR, None)
                if isinstance(info, MutationInfo):
                    found[name] = info
                elif name in found:
                    del found[name]
        cls._mutations = found

    # ------------------------------------------------------------------ config round-trip
    @property
    def config(self) -> dict[str, Any]:
        """JSON-serialisable architecture, with a ``"type"`` key naming the class."""
        return {"type": type(self).__name__, **self._config_body()}

    def _config_body(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not describe its config")

    @classmethod
    def _build_from_config(cls, body: dict[str, Any]) -> Self:
        return cls(**body)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], device: torch.device | str | None = None) -> EvolvableModule:
        """Rebuild the exact architecture described by `config` (weights are freshly initialised).

        Dispatches on ``config["type"]``; called on a subclass, the result must be an instance of it.
        """
        module = from_config(config, device=device)
        if not isinstance(module, cls):
            raise ValueError(f"config describes a {type(module).__name__}, not a {cls.__name__}")
        return module

    def clone(self) -> Self:
        """A deep, independent copy (no shared tensors), on the same device and dtype."""
        return copy.deepcopy(self)

    # ------------------------------------------------------------------ mutations
    def _delegates(self) -> dict[str, list[EvolvableModule]]:
        """Parts whose mutations this module exposes as ``"prefix.method"`` (mutated in lockstep)."""
        return {}

    def mutation_methods(self, kind: str | None = None) -> list[str]:
        """Names of the mutations available now (within bounds), optionally of one kind only."""
        names = [
            name for name, info in self._mutations.items()
            if (kind is None or info.kind == kind) and info.available(self)
        ]
        for prefix, parts in self._delegates().items():
            common = parts[0].mutation_methods(kind)
            for part in parts[1:]:
                allowed = set(part.mutation_methods(kind))
                common = [name for name in common if name in allowed]
            names.extend(f"{prefix}.{name}" for name in common)
        return names

    def mutation_kind(self, name: str) -> str:
        """The kind ("layer", "node" or "activation") of mutation `name`."""
        prefix, _, rest = name.partition(".")
        if rest:
            parts = self._delegates().get(prefix)
            if not parts:
                raise MutationError(f"{type(self).__name__} has no part named {prefix!r}")
            return parts[0].mutation_kind(rest)
        if name not in self._mutations:
            raise MutationError(f"{type(self).__name__} has no mutation {name!r}")
        return self._mutations[name].kind

    def mutate(self, name: str, rng: np.random.Generator | None = None, **kwargs: Any) -> dict[str, Any]:
        """Apply mutation `name`, sampling unspecified parameters from `rng`; return them resolved."""
        if name not in self.mutation_methods():
            known = self._all_mutation_names()
            reason = "is not available now (a bound is reached)" if name in known else "is unknown"
            raise MutationError(f"mutation {name!r} of {type(self).__name__} {reason}; available: {self.mutation_methods()}")
        return self._apply_mutation(name, np.random.default_rng() if rng is None else rng, kwargs)

    def _apply_mutation(self, name: str, rng: np.random.Generator, kwargs: dict[str, Any]) -> dict[str, Any]:
        prefix, _, rest = name.partition(".")
        if rest:
            parts = self._delegates()[prefix]
            resolved = parts[0]._apply_mutation(rest, rng, kwargs)
            for part in parts[1:]:
                part._apply_mutation(rest, rng, dict(resolved))
            return resolved
        method = getattr(self, name)
        try:
            inspect.signature(method).bind(rng=rng, **kwargs)
        except TypeError as error:
            raise MutationError(f"bad parameters for {type(self).__name__}.{name}: {error}") from error
        return dict(method(rng=rng, **kwargs))

    def _all_mutation_names(self) -> list[str]:
        names = list(self._mutations)
        for prefix, parts in self._delegates().items():
            names.extend(f"{prefix}.{name}" for name in parts[0]._all_mutation_names())
        return names


def from_config(config: Mapping[str, Any], device: torch.device | str | None = None) -> EvolvableModule:
    """Rebuild any evolvable module from its ``config`` (dispatching on ``config["type"]``)."""
    if "type" not in config:
        raise ValueError("an evolvable module config needs a 'type' key")
    type_name = str(config["type"])
    klass = _REGISTRY.get(type_name)
    if klass is None:
        raise ValueError(f"unknown evolvable module type {type_name!r}; known: {sorted(_REGISTRY)}")
    body = {key: copy.deepcopy(value) for key, value in config.items() if key != "type"}
    module = klass._build_from_config(body)
    return module.to(device) if device is not None else module


def registered_types() -> dict[str, type[EvolvableModule]]:
    """The type registry used by :func:`from_config` (class name -> class)."""
    return dict(_REGISTRY)
