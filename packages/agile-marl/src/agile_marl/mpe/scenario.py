"""The scenario interface of the batched MPE: one subclass per mpe2 scenario.

A scenario fixes the world (`make_layout`), splits the agents into teams whose observations
have one layout (`teams`), and computes observations, rewards and early termination for all
sub-envs at once. Initial states are drawn per sub-env in mpe2's order (landmark assignments,
then agent and landmark positions), so a sub-env seeded like an mpe2 env starts where it does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar, cast

import numpy as np

from agile_marl.mpe.config import MPEConfig, parse_config
from agile_marl.mpe.core import DIM_P, BatchedWorld, WorldLayout

C = TypeVar("C", bound=MPEConfig)


class Scenario(ABC, Generic[C]):
    """One MPE scenario under one configuration."""

    name: ClassVar[str]
    """mpe2's module name, e.g. ``simple_spread_v3``."""
    config_type: ClassVar[type[MPEConfig]] = MPEConfig
    num_goals: ClassVar[int] = 0
    """Landmark assignments drawn per episode (``world.goals`` columns), each uniform over landmarks."""
    local_ratio: float | None = None
    """mpe2's blend ``global * (1 - local_ratio) + own * local_ratio``; None: own rewards only."""

    def __init__(self, config: C) -> None:
        self.config = config
        self.layout = self.make_layout()
        self.teams = [np.asarray(team, dtype=np.intp) for team in self.make_teams()]

    @classmethod
    def from_options(cls, **options: Any) -> Scenario[Any]:
        """The scenario with mpe2's keyword arguments (unknown ones raise TypeError)."""
        return cls(cast(C, parse_config(cls.config_type, cls.name, options)))

    # ------------------------------------------------------------------ what a scenario defines
    @abstractmethod
    def make_layout(self) -> WorldLayout:
        """The agents and landmarks."""

    def make_teams(self) -> list[list[int]]:
        """Agent indices grouped by observation layout (default: one team of all agents)."""
        return [list(range(self.layout.num_agents))]

    @abstractmethod
    def observe(self, world: BatchedWorld) -> list[np.ndarray]:
        """Per team, the observations ``[n, team size, obs_dim]`` of its agents (float64)."""

    @abstractmethod
    def rewards(self, world: BatchedWorld) -> np.ndarray:
        """Every agent's own reward ``[n, agents]``."""

    def global_reward(self, world: BatchedWorld) -> np.ndarray:
        """The shared reward ``[n]`` blended in with `local_ratio`."""
        raise NotImplementedError(f"{self.name} has no global reward")

    def terminal(self, world: BatchedWorld) -> np.ndarray | None:
        """``[n]`` bool: the episode ends early (mpe2's ``is_terminal``); None: never."""
        return None

    def goals_of(self, world: Any) -> list[int]:
        """The landmark assignments of an mpe2 world (``env.unwrapped.world``), as `world.goals`."""
        return []

    # ------------------------------------------------------------------ shared behaviour
    def draw(self, rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
        """One sub-env's landmark assignments and unit draws ``[entities, 2]`` in ``[0, 1)``, from
        `rng` in mpe2's order (`BatchedWorld.reset_rows` maps the draws to positions exactly as
        ``rng.uniform(-spawn, spawn)`` would)."""
        goals = [int(rng.integers(self.layout.num_landmarks)) for _ in range(self.num_goals)]
        return rng.random((self.layout.num_entities, DIM_P)), goals

    def blended_rewards(self, world: BatchedWorld) -> np.ndarray:
        """``[n, agents]`` float64: the rewards mpe2 gives (with `local_ratio` when set)."""
        own = self.rewards(world)
        if self.local_ratio is None:
            return own
        return self.global_reward(world)[:, None] * (1 - self.local_ratio) + own * self.local_ratio


def goal_positions(world: BatchedWorld, column: int = 0) -> np.ndarray:
    """``[n, 2]``: the position of each sub-env's assigned landmark ``world.goals[:, column]``."""
    return world.pos[np.arange(world.n), world.layout.num_agents + world.goals[:, column]]
