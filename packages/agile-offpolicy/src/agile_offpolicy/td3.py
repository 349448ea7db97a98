"""Twin Delayed DDPG (Fujimoto et al., 2018).

TD3 keeps DDPG's actor-critic structure (see :mod:`agile_offpolicy.ddpg`) and fixes its
tendency to overestimate Q values with three changes:

1. **Clipped double-Q learning.** Two critics ``Q_1``, ``Q_2`` (each with a target) regress on
   one shared target that uses the *smaller* target estimate::

       y = r + gamma * (1 - terminated) * min(Q_1_target(s', a'), Q_2_target(s', a'))

2. **Target policy smoothing.** The target action is perturbed by clipped Gaussian noise, so
   the critic cannot exploit sharp peaks of its own estimate::

       a' = clip(mu_target(s') + clip(eps, -noise_clip, noise_clip), low, high),
       eps ~ N(0, policy_noise^2)

   `policy_noise` and `noise_clip` are relative to half the action range (in normalised action
   units ``[-1, 1]``), so the defaults 0.2 / 0.5 suit any action scale.

3. **Delayed policy updates.** The actor (trained on ``Q_1`` only) and all target networks are
   updated once every ``policy_freq`` critic updates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup
from agile_core.hpo.hyperparameters import HyperparameterConfig
from agile_core.networks import ContinuousQNetwork
from agile_core.specs.network import NetworkSpec
from agile_offpolicy.ddpg import DDPG
from agile_offpolicy.specs import TD3Spec

__all__ = ["TD3"]


_DEFAULTS = TD3Spec.defaults()
"""The registered spec's defaults (TD3's own `tau`, `policy_noise`, `noise_clip`)."""

class TD3(DDPG):
    """TD3 agent: DDPG with twin critics ``critic_1``/``critic_2`` (and their ``*_target``),
    clipped double-Q targets, target policy smoothing and delayed actor updates.

    Takes every argument of :class:`~agile_offpolicy.ddpg.DDPG` (as keywords after `net_config`;
    the hyperparameters are :class:`~agile_offpolicy.specs.TD3Spec`'s fields, with its defaults
    and rules: ``tau`` defaults to TD3's own, 5e-3) plus:

    Args:
        policy_noise: Std of the target smoothing noise, relative to half the action range.
        noise_clip: Clip of the target smoothing noise, relative to half the action range.
    """

    spec_class = TD3Spec
    critic_names: ClassVar[tuple[str, ...]] = ("critic_1", "critic_2")

    # hyperparameters of its own, set from TD3Spec (declared here for the type checker)
    policy_noise: float
    noise_clip: float

    critic_1: ContinuousQNetwork
    critic_2: ContinuousQNetwork
    critic_1_target: ContinuousQNetwork
    critic_2_target: ContinuousQNetwork

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        hp_config: HyperparameterConfig | None = None,
        net_config: NetworkSpec | Mapping[str, Any] | None = None,
        *,
        tau: float = _DEFAULTS["tau"],
        policy_noise: float = _DEFAULTS["policy_noise"],
        noise_clip: float = _DEFAULTS["noise_clip"],
        **ddpg_options: Any,
    ) -> None:
        self.adopt_hyperparameters({**ddpg_options, **locals()})
        super().__init__(observation_space, action_space, index=index, hp_config=hp_config, net_config=net_config,
                         tau=tau, **ddpg_options)

    @classmethod
    def _target_actions(cls, group: MemberGroup, next_obs: Any, weights: torch.Tensor) -> torch.Tensor:
        """Target policy smoothing: ``clip(mu_target(s') + clip(eps, -c, c), -1, 1)`` in normalised
        units, each member's noise drawn from its own ``rng`` for its own rows (zero on padding)."""
        action = cls._policy_actions(group, "actor_target", next_obs)
        sizes = (weights > 0).sum(dim=1).tolist()
        noise = np.zeros(tuple(action.shape), dtype=np.float64)
        for index, (member, size) in enumerate(zip(group.members, sizes, strict=True)):
            if size:
                assert isinstance(member, TD3)
                draw = member.rng.normal(0.0, member.policy_noise, size=(size, action.shape[-1]))
                noise[index, :size] = np.clip(draw, -member.noise_clip, member.noise_clip)
        return (action + torch.as_tensor(noise, dtype=action.dtype, device=action.device)).clamp(-1.0, 1.0)
