"""A population acting in one widened multi-agent vector env: member ``p`` owns the consecutive
sub-envs ``[p * num_envs, (p + 1) * num_envs)``; members whose networks stack act as one group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agile_core.algorithms.group import MemberGroup, make_member_groups

__all__ = ["Groups", "MultiAgentActions", "act_groups", "current_groups", "member_view"]


@dataclass
class MultiAgentActions:
    """What a population-shaped acting rule gives: env actions per agent ``[P, rows, ...]`` and
    whatever else the algorithm's loop needs (``extras[name][agent]``, e.g. IPPO's log-probs)."""

    actions: dict[str, np.ndarray]
    extras: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)


Groups = list[tuple[list[int], MemberGroup]]


def current_groups(population: Sequence[Any], groups: Groups | None) -> Groups:
    """`groups` while every one is still its members' own (same agents, no mutation since), else new ones."""
    if groups is not None and all(group.is_current() for _, group in groups) and \
            [agent for slots, group in groups for agent in group.members] == [population[s] for slots, _ in groups
                                                                             for s in slots]:
        return groups
    return make_member_groups(population)


def member_view(value: Any, members: int, slots: Sequence[int]) -> Any:
    """Rows ``[members * n, ...]`` (array, or dict/tuple of arrays) as ``[len(slots), n, ...]`` for `slots`."""
    if isinstance(value, Mapping):
        return {key: member_view(item, members, slots) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(member_view(item, members, slots) for item in value)
    array = np.asarray(value)
    return array.reshape(members, -1, *array.shape[1:])[list(slots)]


def act_groups(groups: Groups, obs: Mapping[str, Any], members: int, *, training: bool,
               action_masks: Mapping[str, Any] | None = None,
               ) -> tuple[dict[str, np.ndarray], list[tuple[list[int], MultiAgentActions]]]:
    """Every group's acting rule on its members' rows: env actions ``{agent: [members * n, ...]}``
    in population order, and each group's full result (its extras) with its slots."""
    merged: dict[str, np.ndarray] = {}
    results: list[tuple[list[int], MultiAgentActions]] = []
    for slots, group in groups:
        first = group.members[0]
        inputs = first.population_inputs({agent: member_view(obs[agent], members, slots) for agent in first.agent_ids})
        masks = None if not action_masks else {agent: member_view(mask, members, slots)
                                               for agent, mask in action_masks.items()}
        result = type(first).act_population(group, inputs, training=training, action_masks=masks)
        results.append((slots, result))
        for agent, action in result.actions.items():
            if agent not in merged:
                merged[agent] = np.zeros((members, *action.shape[1:]), dtype=action.dtype)
            merged[agent][slots] = action
    return {agent: action.reshape(-1, *action.shape[2:]) for agent, action in merged.items()}, results
