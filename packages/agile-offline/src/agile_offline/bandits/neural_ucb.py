"""NeuralUCB (Zhou, Li and Gu, 2020): pull the arm with the highest upper confidence bound
``f(x) + gamma * s(x)``, where ``s`` is the network-gradient spread of :mod:`.base`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.specs.network import NetworkSpec
from agile_offline.bandits.base import NeuralBandit
from agile_offline.specs.bandits import NeuralUCBSpec

__all__ = ["NeuralUCB"]

_DEFAULTS = NeuralUCBSpec.defaults()
"""The registered spec's defaults: the one home of this algorithm's keyword defaults."""


class NeuralUCB(NeuralBandit):
    """Neural contextual bandit with upper-confidence-bound exploration (arguments: see
    :class:`~agile_offline.bandits.base.NeuralBandit`; the hyperparameters are ``NeuralUCBSpec``'s fields,
    with its defaults and rules)."""

    spec_class = NeuralUCBSpec

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, index: int = 0,
                 hp_config: HyperparameterConfig | None = None,
                 net_config: NetworkSpec | Mapping[str, Any] | None = None,
                 gamma: float = _DEFAULTS["gamma"], lamb: float = _DEFAULTS["lamb"], reg: float = _DEFAULTS["reg"],
                 batch_size: int = _DEFAULTS["batch_size"], lr: float = _DEFAULTS["lr"],
                 learn_step: int = _DEFAULTS["learn_step"], device: str | torch.device = "cpu",
                 seed: int | None = None) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, net_config=net_config,
                         device=device, seed=seed)

    @classmethod
    def explore_scores(cls, group: MemberGroup, values: torch.Tensor, spread2: torch.Tensor) -> torch.Tensor:
        """``f + gamma * s`` per member and arm."""
        return values + group.column("gamma") * spread2.sqrt()
