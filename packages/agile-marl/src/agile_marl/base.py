"""The base of every multi-agent algorithm: per-agent spaces, agent groups, and the single-agent
entry points (`get_action`, `test`) as the ``P = 1`` case of the population-shaped ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_core.algorithms.base import MultiAgentAlgorithm
from agile_core.networks.preprocessing import preprocess_population_observation
from agile_marl.agent_ids import agent_groups
from agile_marl.population import MultiAgentActions

__all__ = ["MultiAgentAgent"]

class MultiAgentAgent(MultiAgentAlgorithm):
    """Agents acting together in a PettingZoo Parallel env (see :mod:`agile_marl`).

    ``agent_ids`` follow the env's ``possible_agents`` order; ``agent_groups`` maps each group
    (agents whose ids share a prefix, ``speaker_0`` -> ``speaker``) to its agents.
    """

    normalize_images: bool = True
    """Scale uint8 image observations to [0, 1]; a hyperparameter where the algorithm's spec has it
    (MADDPG, MATD3: adopted as the member's own attribute before this constructor runs)."""

    def __init__(self, observation_spaces: Mapping[str, spaces.Space], action_spaces: Mapping[str, spaces.Space],
                 **kwargs: Any) -> None:
        super().__init__(observation_spaces, action_spaces, **kwargs)
        self.agent_groups = agent_groups(self.agent_ids)
        self.agent_fitness: list[dict[str, float]] = []
        """Per-agent mean returns of each evaluation with ``sum_scores`` false, the latest last
        (:meth:`test`, the loops' evaluation); empty otherwise."""

    @staticmethod
    def net_name(role: str, key: str) -> str:
        """The attribute holding network `role` of agent (or group) `key`: ``actor_speaker_0``."""
        return f"{role}_{key}"

    def population_key(self) -> str:
        """Algorithm, device and every agent's spaces (members of one group must share them)."""
        spaces_key = tuple((agent, repr(self.observation_spaces[agent]), repr(self.action_spaces[agent]))
                           for agent in self.agent_ids)
        return repr((type(self).__qualname__, str(self.device), spaces_key))

    # ------------------------------------------------------------------ inputs
    def population_inputs(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """Network inputs ``[P, rows, ...]`` per agent from raw observations laid out ``[P, rows, ...]``."""
        return {agent: preprocess_population_observation(self.observation_spaces[agent], obs[agent], self.device,
                                                         self.normalize_images)
                for agent in self.agent_ids}

    # ------------------------------------------------------------------ single agent = P = 1
    def get_action(self, obs: Mapping[str, Any], training: bool = True,
                   infos: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Env actions ``{agent: [rows, ...]}`` for observations ``{agent: [rows, ...]}`` (the
        ``P = 1`` case of :meth:`act_population`); `infos` may carry ``action_mask`` per agent."""
        leading = {agent: _with_axis(obs[agent]) for agent in self.agent_ids}
        masks = _action_masks(infos)
        result = type(self).act_population(self.solo_group(), self.population_inputs(leading), training=training,
                                           action_masks=None if masks is None else
                                           {agent: _with_axis(mask) for agent, mask in masks.items()})
        return {agent: action[0] for agent, action in result.actions.items()}

    @classmethod
    def act_population(cls, group: Any, inputs: Any, *args: Any, training: bool = True,
                       action_masks: Mapping[str, Any] | None = None, **kwargs: Any) -> MultiAgentActions:
        """The algorithm's acting rule for a group (see the contract in :mod:`agile_marl`)."""
        raise NotImplementedError(f"{cls.__name__} has no population-shaped acting rule")

    def test(self, env: Any, max_steps: int | None = None, loop: int = 1, sum_scores: bool = True) -> float:
        """Greedy fitness in a multi-agent vector env: the mean (over `loop` x ``num_envs``
        episodes) of the summed returns of all agents; appended to ``fitness``. With
        `sum_scores` false the per-agent means are kept in ``agent_fitness`` as well."""
        from agile_marl.evaluation import evaluate_population

        return evaluate_population([self], env, loop=loop, max_steps=max_steps, sum_scores=sum_scores)[0]


def _with_axis(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _with_axis(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_with_axis(item) for item in value)
    if isinstance(value, torch.Tensor):
        return value.unsqueeze(0)
    return np.asarray(value)[None]


def _action_masks(infos: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not infos:
        return None
    masks = infos.get("action_mask")
    return dict(masks) if masks else None
