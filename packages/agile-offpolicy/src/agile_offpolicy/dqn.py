"""Deep Q-Network (Mnih et al., 2015) with optional double Q-learning (van Hasselt et al., 2016).

The learning step, acting and evaluation are core's :class:`~agile_core.algorithms.q_learning.QLearner`
(shared with offline CQN); DQN is that learner with the defaults of its registered spec, learning
from a replay memory the training loop fills with epsilon-greedy experience.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from gymnasium import spaces

from agile_core.algorithms.q_learning import QLearner, td_loss
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import EvolvableModule
from agile_core.specs.network import NetworkSpec
from agile_offpolicy.specs import DQNSpec

__all__ = ["DQN", "td_loss"]

_DEFAULTS = DQNSpec.defaults()
"""The registered spec's defaults: the one home of this algorithm's keyword defaults."""


class DQN(QLearner):
    """DQN agent: an evolvable Q network, its target copy and an Adam optimizer.

    Arguments as :class:`~agile_core.algorithms.q_learning.QLearner`; the hyperparameters are
    ``DQNSpec``'s fields, with its defaults and rules.
    """

    spec_class = DQNSpec

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        hp_config: HyperparameterConfig | None = None,
        net_config: NetworkSpec | Mapping[str, Any] | None = None,
        batch_size: int = _DEFAULTS["batch_size"],
        lr: float = _DEFAULTS["lr"],
        learn_step: int = _DEFAULTS["learn_step"],
        gamma: float = _DEFAULTS["gamma"],
        tau: float = _DEFAULTS["tau"],
        double: bool = _DEFAULTS["double"],
        normalize_images: bool = _DEFAULTS["normalize_images"],
        loss: str = _DEFAULTS["loss"],
        max_grad_norm: float | None = _DEFAULTS["max_grad_norm"],
        device: str | torch.device = "cpu",
        seed: int | None = None,
        actor_network: EvolvableModule | None = None,
    ) -> None:
        self.adopt_hyperparameters(locals())
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, net_config=net_config,
                         device=device, seed=seed, actor_network=actor_network)
