"""Which hyperparameters of an algorithm mutate, within which range, by how much."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from agile_core.specs.mutation import RLHyperparameter

FLOAT_FACTORS = (1.2, 0.8)
INT_FACTORS = (1.5, 0.75)


@dataclass(frozen=True)
class RLParameter:
    """A mutable hyperparameter: its range, numeric type and grow/shrink factors."""

    name: str
    min: float
    max: float
    dtype: type = float
    grow_factor: float | None = None
    shrink_factor: float | None = None

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise ValueError(f"{self.name}: min ({self.min}) must not exceed max ({self.max})")
        if self.dtype not in (int, float):
            raise ValueError(f"{self.name}: dtype must be int or float, got {self.dtype!r}")

    @property
    def factors(self) -> tuple[float, float]:
        """(grow, shrink) multipliers, defaulting by type."""
        grow, shrink = INT_FACTORS if self.dtype is int else FLOAT_FACTORS
        return (self.grow_factor or grow, self.shrink_factor or shrink)

    def clamp(self, value: float) -> int | float:
        """Clamp into [min, max], keeping the type (integers rounded)."""
        if self.dtype is int:
            low, high = math.ceil(self.min), math.floor(self.max)
            return int(min(max(round(value), low), high))
        return float(min(max(value, self.min), self.max))

    def mutate(self, value: float, rng: np.random.Generator) -> int | float:
        """Grow or shrink `value` (equal odds) and clamp; an integer moves by at least one."""
        grow, shrink = self.factors
        up = bool(rng.random() < 0.5)
        proposal = value * (grow if up else shrink)
        if self.dtype is int and round(proposal) == round(value):
            proposal = value + (1 if up else -1)
        return self.clamp(proposal)


class HyperparameterConfig(Mapping[str, RLParameter]):
    """The set of hyperparameters an agent may mutate (empty: RL-HP mutation does nothing)."""

    def __init__(self, **parameters: RLParameter) -> None:
        for key, parameter in parameters.items():
            if key != parameter.name:
                raise ValueError(f"hyperparameter key {key!r} does not match its name {parameter.name!r}")
        self._parameters = dict(parameters)

    @classmethod
    def from_selection(
        cls, selection: Mapping[str, RLHyperparameter | Mapping[str, Any]], types: Mapping[str, type]
    ) -> HyperparameterConfig:
        """Build from a manifest's `rl_hp_selection` and the algorithm's numeric field types."""
        parameters = {}
        for name, bounds in selection.items():
            spec = bounds if isinstance(bounds, RLHyperparameter) else RLHyperparameter.model_validate(bounds)
            if name not in types:
                raise ValueError(f"{name!r} is not a numeric hyperparameter; choose from {sorted(types)}")
            parameters[name] = RLParameter(name, spec.min, spec.max, types[name], spec.grow_factor, spec.shrink_factor)
        return cls(**parameters)

    def __getitem__(self, key: str) -> RLParameter:
        return self._parameters[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def __len__(self) -> int:
        return len(self._parameters)

    def sample(self, rng: np.random.Generator) -> RLParameter:
        """One parameter, uniformly."""
        names = sorted(self._parameters)
        return self._parameters[names[int(rng.integers(len(names)))]]

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """JSON form (for checkpoints)."""
        return {
            name: {"min": p.min, "max": p.max, "dtype": p.dtype.__name__,
                   "grow_factor": p.grow_factor, "shrink_factor": p.shrink_factor}
            for name, p in self._parameters.items()
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, Any]]) -> HyperparameterConfig:
        """Inverse of `to_dict`."""
        return cls(**{
            name: RLParameter(name, float(d["min"]), float(d["max"]), int if d["dtype"] == "int" else float,
                              d.get("grow_factor"), d.get("shrink_factor"))
            for name, d in data.items()
        })
