"""The manifest section of the example algorithm: its name, hyperparameters, defaults and rules.

Torch-free on purpose: the registry imports specs to validate manifests, and `agile validate`
must stay fast. The implementation is named by `algorithm_class` and imported only to train.
"""

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from agile_core.specs.algorithm import MUTABLE, AlgorithmSpec


class ExpectedSarsaSpec(AlgorithmSpec):
    """Expected SARSA with one Q network and no target network: the TD target is the expected
    value of the next state under an epsilon-greedy policy of the same network."""

    name: Literal["ExpectedSARSA"] = "ExpectedSARSA"
    """Algorithm name."""
    lr: Annotated[float, Field(gt=0.0), MUTABLE] = 1e-3
    """Adam learning rate."""
    batch_size: Annotated[int, Field(ge=1), MUTABLE] = 64
    """Transitions sampled from the replay buffer per learning step."""
    learn_step: Annotated[int, Field(ge=1), MUTABLE] = 4
    """Environment steps of one member (over all its sub-environments) between learning steps."""
    gamma: Annotated[float, Field(gt=0.0, le=1.0), MUTABLE] = 0.99
    """Discount factor."""
    policy_epsilon: Annotated[float, Field(ge=0.0, le=1.0), MUTABLE] = 0.05
    """Exploration rate of the epsilon-greedy policy whose value is learnt (0: Q-learning's max)."""
    max_grad_norm: Annotated[float, Field(gt=0.0)] | None = 10.0
    """Clip each update's gradient to this global norm (null: no clipping)."""

    algorithm_class: ClassVar[str] = "tests.core.example_algorithm.algorithm:ExpectedSarsa"
    mutable_by_default: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    default_ranges: ClassVar[dict[str, tuple[float, float]]] = {"lr": (1e-4, 1e-2)}

    def section_issues(self, sections: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str, Any]]:
        """Also: a batch must fit in the replay buffer."""
        issues = super().section_issues(sections)
        buffer = sections.get("replay_buffer") or getattr(sections.get("training"), "replay_buffer", None)
        if buffer is not None and self.batch_size > buffer.max_size:
            issues.append((("algorithm", "batch_size"), f"is larger than the replay buffer (max_size "
                           f"{buffer.max_size}): no batch could ever be drawn", self.batch_size))
        return issues

    def section_warnings(self, sections: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str, Any]]:
        """Also: a learning interval longer than the whole budget never learns."""
        warnings = super().section_warnings(sections)
        budget = getattr(sections.get("training"), "max_steps", None)
        if budget is not None and self.learn_step > budget:
            warnings.append((("algorithm", "learn_step"), f"is above max_steps ({budget}): no member would "
                             "ever learn", self.learn_step))
        return warnings
