"""Episode bookkeeping for multi-agent vector envs (per sub-env, per agent returns)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FinishedEpisode:
    """One finished episode of one sub-env."""

    returns: dict[str, float]
    """Each agent's return (0 for an agent that never acted)."""
    total: float
    """The sum of the agents' returns."""
    length: int
    """Vector steps of the episode (autoreset steps not counted)."""
    env: int
    """The sub-env it ran in."""


class MultiAgentEpisodeTracker:
    """Running per-agent returns and lengths of each sub-env of a `PettingZooVecEnv`.

    Call :meth:`step` with each step's rewards and info: a reward counts where
    ``info["valid"][agent]`` is True; a sub-env's episode is recorded when
    ``info["episode_over"]`` says it ended, and kept until :meth:`pop_finished`.
    """

    def __init__(self, num_envs: int, agents: list[str]) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = int(num_envs)
        self.agents = list(agents)
        self.returns = {a: np.zeros(self.num_envs, dtype=np.float64) for a in self.agents}
        self.lengths = np.zeros(self.num_envs, dtype=np.int64)
        self.finished: list[FinishedEpisode] = []

    def reset(self) -> None:
        """Forget the running episodes (call after ``env.reset()``); finished ones are kept."""
        for returns in self.returns.values():
            returns[:] = 0.0
        self.lengths[:] = 0

    def step(self, rewards: dict[str, Any], info: dict[str, Any]) -> dict[str, np.ndarray]:
        """Account one vector step; return its valid masks (``info["valid"]``)."""
        valid = info["valid"]
        for agent in self.agents:
            mask = np.asarray(valid[agent], dtype=bool)
            self.returns[agent][mask] += np.asarray(rewards[agent], dtype=np.float64)[mask]
        self.lengths[~np.asarray(info["autoreset"], dtype=bool)] += 1
        for env in np.flatnonzero(np.asarray(info["episode_over"], dtype=bool)).tolist():
            returns = {a: float(self.returns[a][env]) for a in self.agents}
            self.finished.append(FinishedEpisode(returns, float(sum(returns.values())),
                                                 int(self.lengths[env]), env))
            for agent in self.agents:
                self.returns[agent][env] = 0.0
            self.lengths[env] = 0
        return valid

    def pop_finished(self) -> list[FinishedEpisode]:
        """The episodes finished since the last call (then cleared), in the order they ended."""
        finished, self.finished = self.finished, []
        return finished

    def pop_finished_by_member(self, members: int) -> list[list[FinishedEpisode]]:
        """Like :meth:`pop_finished`, split by member when ``members`` population members own
        consecutive, equal slices of the sub-envs (member p: ``[p*k, (p+1)*k)``)."""
        if members < 1 or self.num_envs % members:
            raise ValueError(f"{self.num_envs} sub-envs cannot be split among {members} members")
        per_member = self.num_envs // members
        split: list[list[FinishedEpisode]] = [[] for _ in range(members)]
        for episode in self.pop_finished():
            split[episode.env // per_member].append(episode)
        return split
