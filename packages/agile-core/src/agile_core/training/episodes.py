"""Episode bookkeeping for vector envs with Gymnasium's next-step autoreset."""

from __future__ import annotations

from typing import Any

import numpy as np


class EpisodeTracker:
    """Per-sub-env running returns and lengths, and the autoreset flags of the next step.

    Call :meth:`step` with each ``env.step`` result. It returns the *valid* mask of that step:
    False for a sub-env whose previous step ended its episode, because then this step only
    reset it (reward 0, the action ignored) and is no transition at all. Off-policy loops pass
    the mask to the replay buffer, on-policy loops to the rollout buffer. Finished episodes
    (terminated or truncated) are collected until :meth:`pop_finished`.
    """

    def __init__(self, num_envs: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = int(num_envs)
        self.returns = np.zeros(self.num_envs, dtype=np.float64)
        self.lengths = np.zeros(self.num_envs, dtype=np.int64)
        self.autoreset = np.zeros(self.num_envs, dtype=bool)
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self.finished_envs: list[int] = []

    def reset(self) -> None:
        """Forget the running episodes (call after ``env.reset()``); finished ones are kept."""
        self.returns[:] = 0.0
        self.lengths[:] = 0
        self.autoreset[:] = False

    def step(self, reward: Any, terminated: Any, truncated: Any) -> np.ndarray:
        """Account one vector step; return its valid mask (bool ``[num_envs]``)."""
        reward = np.asarray(reward, dtype=np.float64).reshape(self.num_envs)
        done = (np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)).reshape(self.num_envs)
        valid = ~self.autoreset
        self.returns[valid] += reward[valid]
        self.lengths[valid] += 1
        ended = done & valid
        if ended.any():
            self.finished_returns.extend(self.returns[ended].tolist())
            self.finished_lengths.extend(self.lengths[ended].tolist())
            self.finished_envs.extend(np.flatnonzero(ended).tolist())
            self.returns[ended] = 0.0
            self.lengths[ended] = 0
        self.autoreset = ended
        return valid

    def pop_finished(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the episodes finished since the last call (then cleared)."""
        returns, lengths = self.finished_returns, self.finished_lengths
        self.finished_returns, self.finished_lengths, self.finished_envs = [], [], []
        return returns, lengths

    def pop_finished_by_agent(self, agents: int) -> list[tuple[list[float], list[int]]]:
        """Like :meth:`pop_finished`, split by agent when ``agents`` agents own consecutive,
        equal slices of the sub-envs (the population-batched loops)."""
        per_agent = self.num_envs // agents
        split: list[tuple[list[float], list[int]]] = [([], []) for _ in range(agents)]
        for ret, length, env in zip(self.finished_returns, self.finished_lengths, self.finished_envs, strict=True):
            returns, lengths = split[env // per_agent]
            returns.append(ret)
            lengths.append(length)
        self.pop_finished()
        return split
