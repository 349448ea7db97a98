"""Registers the toy paradigm: one algorithm, one env spec."""

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from agile_core.registry import Paradigm
from agile_core.specs.algorithm import AlgorithmSpec
from agile_core.specs.env import EnvSpec


class ToyAlgoSpec(AlgorithmSpec):
    """A toy algorithm."""

    name: Literal["ToyAlgo"] = "ToyAlgo"
    """Algorithm name."""
    lr: Annotated[float, Field(gt=0)] = 0.01
    """Learning rate."""
    batch_size: Annotated[int, Field(ge=1)] = 8
    """Batch size."""
    use_trick: bool = False
    """A boolean flag (not mutable)."""

    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr", "batch_size")


class ToyEnvSpec(EnvSpec):
    """A toy environment section."""

    difficulty: Annotated[int, Field(ge=0, le=3)] = 1
    """How hard the toy task is."""


class ToyParadigm(Paradigm):
    """Validates toy manifests; trains nothing."""

    name = "toy"
    distribution = "agile-toy"
    algorithms = (ToyAlgoSpec,)
    env_spec = ToyEnvSpec

    def run_loop(self, manifest, env, population, options, device):
        raise NotImplementedError("the toy paradigm only validates manifests")


PARADIGM = ToyParadigm()
