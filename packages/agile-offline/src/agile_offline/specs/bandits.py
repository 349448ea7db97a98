"""Registered specs of the contextual-bandit paradigm: NeuralUCB, NeuralTS and the bandit env."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from agile_core.specs._base import field_error
from agile_core.specs.algorithm import MUTABLE, AlgorithmSpec
from agile_core.specs.env import EnvSpec

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
NonNegative = Annotated[float, Field(ge=0.0)]

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

__all__ = ["BanditEnvSpec", "NeuralTSSpec", "NeuralUCBSpec"]


class _NeuralBanditSpec(AlgorithmSpec):
    """Fields NeuralUCB and NeuralTS share."""

    gamma: Annotated[NonNegative, MUTABLE] = 1.0
    """Exploration scale: weight of the confidence bonus (UCB) or of the posterior spread (TS)."""
    lamb: Annotated[PositiveFloat, MUTABLE] = 1.0
    """Ridge strength: the gradient covariance starts as ``lamb * I``."""
    reg: Annotated[NonNegative, MUTABLE] = 6.25e-4
    """L2 pull of the weights towards their initial values in the regression loss."""
    batch_size: Annotated[PositiveInt, MUTABLE] = 64
    """Stored (context, reward) pairs sampled per learning step."""
    lr: Annotated[PositiveFloat, MUTABLE] = 1e-3
    """Adam learning rate."""
    learn_step: Annotated[PositiveInt, MUTABLE] = 2
    """Bandit steps between learning steps."""

    default_evo_steps: ClassVar[int] = 500


class NeuralUCBSpec(_NeuralBanditSpec):
    """Neural contextual bandit with upper-confidence-bound exploration (Zhou et al., 2020)."""

    name: Literal["NeuralUCB"] = "NeuralUCB"
    """Algorithm name."""

    algorithm_class: ClassVar[str] = "agile_offline.bandits.neural_ucb:NeuralUCB"


class NeuralTSSpec(_NeuralBanditSpec):
    """Neural contextual bandit with Thompson-sampling exploration (Zhang et al., 2021)."""

    name: Literal["NeuralTS"] = "NeuralTS"
    """Algorithm name."""
    lr: Annotated[PositiveFloat, MUTABLE] = 3e-3
    """Adam learning rate."""

    algorithm_class: ClassVar[str] = "agile_offline.bandits.neural_ts:NeuralTS"


class BanditEnvSpec(EnvSpec):
    """A contextual bandit: a labelled table (`features` and `targets` CSV files: each row's
    target is the arm that pays 1) or a custom env by `entrypoint`."""

    num_envs: int = Field(default=1, ge=1, le=1)
    """Bandit envs are not vectorised: always 1."""
    features: str | None = None
    """CSV file of feature rows (relative to the manifest); a header row is detected and skipped."""
    targets: str | None = None
    """CSV file with one target column (class labels, any hashable values), one row per feature row."""
    entrypoint: str | None = None
    """`package.module:attr` of a bandit env class or factory (instead of `features`/`targets`)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the entrypoint."""

    @model_validator(mode="after")
    def _one_source(self) -> BanditEnvSpec:
        table = self.features is not None or self.targets is not None
        if table and self.entrypoint is not None:
            raise field_error("entrypoint", "give either `features` and `targets` or `entrypoint`, not both")
        if table and (self.features is None or self.targets is None):
            missing = "targets" if self.targets is None else "features"
            raise field_error(missing, "`features` and `targets` go together: this one is missing")
        if not table and self.entrypoint is None:
            raise field_error("features", "a bandit env needs `features` and `targets` CSV files, or an `entrypoint`")
        if self.entrypoint is not None and not _ENTRYPOINT.match(self.entrypoint):
            raise field_error("entrypoint", "must have the form 'package.module:attribute'")
        return self
