"""NeuralTS (Zhang, Zhou, Li and Gu, 2021): pull the arm with the highest sampled reward
``r ~ N(f(x), gamma^2 * lamb * s(x)^2)``, where ``s`` is the network-gradient spread of
:mod:`.base`; each member draws from its own ``rng`` (saved in checkpoints)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.specs.network import NetworkSpec
from agile_offline.bandits.base import NeuralBandit
from agile_offline.specs.bandits import NeuralTSSpec

__all__ = ["NeuralTS"]

_DEFAULTS = NeuralTSSpec.defaults()
"""The registered spec's defaults: the one home of this algorithm's keyword defaults."""


class NeuralTS(NeuralBandit):
    """Neural contextual bandit with Thompson-sampling exploration (arguments: see
    :class:`~agile_offline.bandits.base.NeuralBandit`; the hyperparameters are ``NeuralTSSpec``'s fields,
    with its defaults and rules)."""

    spec_class = NeuralTSSpec

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
        """A sample of ``N(f, gamma^2 * lamb * s^2)`` per member and arm (standard normals from
        each member's ``rng``)."""
        noise = np.stack([member.rng.standard_normal(values.shape[1]) for member in group.members])
        scale = group.column("gamma") * (group.column("lamb") * spread2).sqrt()
        return values + scale * torch.as_tensor(noise, dtype=values.dtype, device=values.device)
