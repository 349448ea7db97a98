"""Conservative Q-learning on a discrete-action Q network (Kumar et al., 2020: CQL(H)).

Learning from a fixed dataset, plain Q-learning overrates actions the data never took: nothing
corrects their Q values, and the bootstrap's max picks them. CQN adds, per transition, the
penalty

    cql_alpha * (logsumexp_a Q(s, a) - Q(s, a_data))

to the TD loss of core's :class:`~agile_core.algorithms.q_learning.QLearner`: it pushes every
action's Q value down (softly, the largest most) and the dataset's action back up, so the greedy
policy stays near actions with evidence. ``cql_alpha = 0`` is DQN on the dataset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup
from agile_core.algorithms.q_learning import QLearner
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import EvolvableModule
from agile_core.specs.network import NetworkSpec
from agile_offline.specs.cqn import CQNSpec

__all__ = ["CQN"]

_DEFAULTS = CQNSpec.defaults()
"""The registered spec's defaults: the one home of this algorithm's keyword defaults."""


class CQN(QLearner):
    """CQN agent: a Q network, its target copy and Adam, learning conservatively from data.

    Arguments as :class:`~agile_core.algorithms.q_learning.QLearner` (defaults from ``CQNSpec``),
    plus `cql_alpha`, the weight of the conservative penalty. `learn_step` is kept for
    manifests shared with DQN; offline training takes one gradient step per training step.
    """

    spec_class = CQNSpec

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
        cql_alpha: float = _DEFAULTS["cql_alpha"],
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

    @classmethod
    def extra_loss(cls, group: MemberGroup, q_values: torch.Tensor, q_taken: torch.Tensor) -> torch.Tensor:
        """The conservative penalty ``cql_alpha * (logsumexp_a Q(s, a) - Q(s, a_data))`` ``[P, rows]``."""
        return group.column("cql_alpha") * (torch.logsumexp(q_values, dim=-1) - q_taken)
