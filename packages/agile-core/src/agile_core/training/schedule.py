"""Schedules of the off-policy loops: exploration (epsilon) and learning credit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class EpsilonSchedule:
    """Exponentially decaying exploration rate: ``max(end, start * decay ** t)``.

    `t` counts decay steps; the off-policy loop decays once per vector step of an agent (one
    ``get_action`` call for all its sub-envs), as the seed's ``eps_decay`` does. With
    ``decay == 1`` epsilon stays at `start`.
    """

    start: float = 1.0
    end: float = 0.01
    decay: float = 0.999

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"eps_{name} must lie in [0, 1], got {value}")
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"eps_decay must lie in (0, 1], got {self.decay}")

    def value(self, t: float) -> float:
        """Epsilon after `t` decay steps."""
        if t < 0:
            raise ValueError(f"decay step must be >= 0, got {t}")
        return max(self.end, self.start * self.decay ** t)

    def steps_to_reach(self, epsilon: float) -> float:
        """Decay steps until epsilon first reaches `epsilon` (inf when it never does)."""
        if epsilon >= self.start:
            return 0.0
        if epsilon < self.end or self.decay == 1.0 or epsilon <= 0.0:
            return math.inf
        return math.log(epsilon / self.start) / math.log(self.decay)


class LearnCredit(list[int]):
    """Per population slot, the environment steps not yet paid for by a learning step: each vector
    step earns ``num_envs``, each learning step costs the agent's ``learn_step``. Saved in
    checkpoints, so a resumed run learns at the same steps as an uninterrupted one."""

    def __init__(self, slots: int) -> None:
        super().__init__([0] * slots)

    def pay(self, slot: int, earned: int, learn_step: int) -> int:
        """Add `earned` steps to `slot`; return how many learning steps they pay for."""
        updates, self[slot] = divmod(self[slot] + earned, learn_step)
        return updates

    def state_dict(self) -> dict[str, np.ndarray]:
        """Checkpoint state (a buffer-like entry of the run checkpoint)."""
        return {"steps": np.asarray(self, dtype=np.int64)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; a checkpoint of another population size leaves every slot at 0."""
        saved = [int(v) for v in np.asarray(state["steps"]).reshape(-1)]
        self[:] = saved if len(saved) == len(self) else [0] * len(self)
