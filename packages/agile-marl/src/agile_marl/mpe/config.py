"""Scenario options of the batched MPE: mpe2's keyword arguments, checked once at construction.

Every scenario takes mpe2's own keywords with mpe2's defaults. Options that only affect
rendering are accepted (``dynamic_rescaling``); options the batched MPE cannot honour raise a
ValueError naming the option instead of being ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

ConfigT = TypeVar("ConfigT", bound="MPEConfig")


@dataclass(frozen=True)
class MPEConfig:
    """The options every mpe2 scenario has."""

    max_cycles: int = 25
    continuous_actions: bool = False
    render_mode: str | None = None
    dynamic_rescaling: bool = True
    """Rendering only (the batched MPE does not render): accepted and ignored."""
    benchmark_data: bool = False

    def __post_init__(self) -> None:
        if self.render_mode is not None:
            raise ValueError(f"render_mode={self.render_mode!r} is not supported by the batched MPE (it does "
                             "not render); use render_mode=None, or the mpe2 module to render")
        if self.benchmark_data:
            raise ValueError("benchmark_data=True is not supported by the batched MPE; use the mpe2 module "
                             "for benchmark data in infos")
        if isinstance(self.max_cycles, bool) or not isinstance(self.max_cycles, int):
            raise ValueError(f"max_cycles must be an int, got {self.max_cycles!r}")


@dataclass(frozen=True)
class NeighborsConfig(MPEConfig):
    """The options of the scenarios with mpe2's nearest-neighbour partial observability."""

    num_agent_neighbors: int | None = None
    num_landmark_neighbors: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_neighbors(self.num_agent_neighbors, "num_agent_neighbors")
        check_neighbors(self.num_landmark_neighbors, "num_landmark_neighbors")


def check_ratio(value: float, option: str = "local_ratio") -> None:
    """Raise ValueError unless ``0 <= value <= 1`` (mpe2 asserts the same)."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{option} is a proportion: it must be between 0 and 1, got {value!r}")


def check_neighbors(value: int | None, option: str) -> None:
    """Raise ValueError unless `value` is None or a positive int (mpe2 asserts the same)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ValueError(f"{option} must be a positive integer or None, got {value!r}")


def check_no_curriculum(curriculum: bool) -> None:
    """Raise ValueError for ``curriculum=True`` (stages are advanced per mpe2 env instance)."""
    if curriculum:
        raise ValueError("curriculum=True is not supported by the batched MPE (mpe2 advances curriculum "
                         "stages on one env instance); use the mpe2 module for curriculum learning")


def parse_config(config_type: type[ConfigT], scenario: str, options: dict[str, Any]) -> ConfigT:
    """`options` as a `config_type`; an unknown option raises TypeError naming it and the known ones."""
    known = [field.name for field in dataclasses.fields(config_type)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"{scenario}: unknown option(s) {unknown}; the options are {known}")
    return config_type(**options)
