"""Pieces every population-batched loop shares (off-policy DQN, on-policy PPO).

A *population env* gives agent ``p`` the consecutive sub-envs ``[p * n, (p + 1) * n)``. Agents
whose networks have the same structure (:func:`~agile_core.networks.stacked.structure_key`:
widths and inserted residual layers may differ) form a *group* that acts and learns as one stacked
computation (see :mod:`agile_core.networks.stacked`); the helpers here build those groups, pick a
group's rows out of the population's arrays, and lay out per-member index batches of different
sizes as one padded ``[P, width]`` block with loss weights.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agile_core.algorithms.group import MemberGroup, make_member_groups, member_rows
from agile_core.training.envs import swap_image_channels
from agile_core.training.episodes import EpisodeTracker
from agile_core.training.evaluation import evaluate_population_batched
from agile_core.training.profiling import PROFILER

__all__ = ["Groups", "act_groups", "agent_rows", "evaluate_groups", "log_once", "pad_index_batches", "record_losses",
           "start_population_phase"]

Groups = list[tuple[list[int], MemberGroup]]


_LOGGED: set[str] = set()


def log_once(message: str) -> None:
    """Log `message` as a warning the first time only (loops ask before every phase why they
    cannot batch; the user should hear it once)."""
    if message not in _LOGGED:
        _LOGGED.add(message)
        logging.getLogger("agile.population").warning(message)


def agent_rows(slots: Sequence[int], per_agent: int) -> np.ndarray:
    """Indices of the population-env rows owned by the agents in `slots` (in that order)."""
    base = np.asarray(slots, dtype=np.int64)[:, None] * per_agent
    return (base + np.arange(per_agent, dtype=np.int64)).reshape(-1)


def pad_index_batches(indices: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One ``[P, width]`` block from `P` index arrays of different lengths (empty for an idle member).

    Returns ``(padded, weights)``: ``padded[p, :len_p]`` is member ``p``'s indices and the rest
    repeats the first index of the first non-empty array (so every entry is a valid index);
    ``weights[p, :len_p] = 1 / len_p`` and 0 elsewhere, so a weighted row sum of per-row losses
    is each member's mean over its own batch.
    """
    sizes = [int(idx.size) for idx in indices]
    width = max(sizes)
    if width == 0:
        raise ValueError("every index batch is empty")
    if min(sizes) == width:  # the common case: every member active with the same batch size
        return (np.stack([idx.reshape(-1) for idx in indices]).astype(np.int64, copy=False),
                np.full((len(indices), width), 1.0 / width, dtype=np.float32))
    fill = next(idx.reshape(-1)[0] for idx in indices if idx.size)
    padded = np.full((len(indices), width), fill, dtype=np.int64)
    weights = np.zeros((len(indices), width), dtype=np.float32)
    for row, (idx, size) in enumerate(zip(indices, sizes, strict=True)):
        if size:
            padded[row, :size] = idx.reshape(-1)
            weights[row, :size] = 1.0 / size
    return padded, weights


def start_population_phase(env: Any, agents: int, swap_channels: bool) -> tuple[int, EpisodeTracker, Any, dict[str, Any]]:
    """Begin a batched phase in the population env: ``(sub-envs per agent, an episode tracker
    over every sub-env, first observations, first info)`` from a reset of `env`."""
    with PROFILER.env:
        obs, info = env.reset()
    if swap_channels:
        obs = swap_image_channels(obs)
    return env.num_envs // agents, EpisodeTracker(env.num_envs), obs, info



def act_groups(groups: Groups, obs: Any, epsilons: Sequence[float], num_envs: int, masks: Any, agents: int,
               training: bool = True) -> np.ndarray:
    """Actions ``[agents * num_envs, ...]`` for the population env's observations: each group of
    `groups` (``[(slots, MemberGroup)]``) acts on its members' rows through its algorithm's
    ``act_population``, with each member's epsilon and action mask (greedy without `training`)."""
    actions: np.ndarray | None = None
    masks = None if masks is None else np.asarray(masks)
    for slots, group in groups:
        whole = len(groups) == 1 and slots == list(range(agents))
        rows = None if whole else agent_rows(slots, num_envs)
        part_obs = obs if rows is None else _take(obs, rows)
        part_masks = None if masks is None else (masks if rows is None else masks[rows])
        chosen = _group_act(group, part_obs, [epsilons[slot] for slot in slots], part_masks, training)
        if rows is None:
            return chosen
        if actions is None:
            actions = np.empty((agents * num_envs, *chosen.shape[1:]), dtype=chosen.dtype)
        actions[rows] = chosen
    assert actions is not None
    return actions


def _group_act(group: MemberGroup, obs: Any, epsilons: Sequence[float], masks: np.ndarray | None,
               training: bool) -> np.ndarray:
    first = group.members[0]
    inputs = first.population_inputs(member_rows(obs, len(group)))
    member_masks = None if masks is None else list(member_rows(masks, len(group)))
    return group.algorithm.act_population(group, inputs, epsilons, member_masks, training=training)


def _take(obs: Any, rows: np.ndarray) -> Any:
    if isinstance(obs, Mapping):
        return {key: _take(value, rows) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_take(value, rows) for value in obs)
    return np.asarray(obs)[rows]


def record_losses(losses: dict[str, list[float]], value: Any) -> None:
    """Append a learn step's losses: one loss (as `loss`), named losses (e.g. `critic`, `actor`)
    or None (nothing)."""
    if value is None:
        return
    if isinstance(value, Mapping):
        for name, loss in value.items():
            losses.setdefault(str(name), []).append(float(loss))
    else:
        losses.setdefault("loss", []).append(float(value))


def evaluate_groups(population: list[Any], env: Any, *, loop: int, max_steps: int | None,
                    swap_channels: bool) -> list[float]:
    """Greedy fitness of every agent at once in the population env (appended to ``fitness``),
    agents whose networks stack acting as one group."""
    agents = len(population)
    num_envs = env.num_envs // agents
    groups = make_member_groups(population)

    def act(obs: Any, info: dict[str, Any]) -> np.ndarray:
        return act_groups(groups, obs, [0.0] * agents, num_envs, info.get("action_mask"), agents, training=False)

    return evaluate_population_batched(population, env, act, loop=loop, max_steps=max_steps,
                                       swap_channels=swap_channels)

