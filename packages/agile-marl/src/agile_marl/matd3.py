"""Multi-Agent TD3: MADDPG (see :mod:`agile_marl.maddpg`) with TD3's three changes per agent.

1. **Twin centralised critics** ``critic_1_a``, ``critic_2_a`` (one stack of ``2 P`` rows in a
   group) regress on one target built from the *smaller* target estimate.
2. **Target policy smoothing.** Box agents' target actions get clipped Gaussian noise
   (``policy_noise``, ``noise_clip``, relative to half the action range, drawn from each member's
   ``rng`` for its own rows, agent by agent) before clipping to ``[-1, 1]``; Discrete agents'
   target actions stay greedy one-hots.
3. **Delayed updates.** Actors (trained on their first critic) and all targets move once every
   ``policy_freq`` critic updates, counted per member.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, cast

import numpy as np
import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup
from agile_marl.maddpg import MADDPG, _sizes
from agile_marl.specs.maddpg import MATD3Spec

__all__ = ["MATD3"]

_DEFAULTS = MATD3Spec.defaults()
"""The registered spec's defaults (MATD3's own `policy_freq`, `policy_noise`, `noise_clip`)."""


class MATD3(MADDPG):
    """MATD3 agent: :class:`~agile_marl.maddpg.MADDPG` with twin critics per agent
    (``critic_1_a``/``critic_2_a`` and their ``*_target_a``), clipped double-Q targets, target
    policy smoothing and delayed actor updates.

    Takes every argument of MADDPG (as keywords) plus:

    Args:
        policy_freq: Critic updates per actor and target update.
        policy_noise: Std of the target smoothing noise, relative to half the action range.
        noise_clip: Clip of the target smoothing noise, relative to half the action range.
    """

    spec_class = MATD3Spec
    critic_names: ClassVar[tuple[str, ...]] = ("critic_1", "critic_2")

    # hyperparameters, set from MATD3Spec (declared here for the type checker; policy_freq on MADDPG)
    policy_noise: float
    noise_clip: float

    def __init__(
        self,
        observation_spaces: Mapping[str, spaces.Space],
        action_spaces: Mapping[str, spaces.Space],
        index: int = 0,
        hp_config: Any = None,
        net_config: Any = None,
        *,
        policy_freq: int = _DEFAULTS["policy_freq"],
        policy_noise: float = _DEFAULTS["policy_noise"],
        noise_clip: float = _DEFAULTS["noise_clip"],
        **maddpg_options: Any,
    ) -> None:
        self.adopt_hyperparameters({**maddpg_options, **locals()})
        super().__init__(observation_spaces, action_spaces, index=index, hp_config=hp_config, net_config=net_config,
                         **maddpg_options)

    @classmethod
    def _target_actions(cls, group: MemberGroup, next_obs: Mapping[str, Any],
                        weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """MADDPG's target actions with Box agents' smoothing noise, ``clip(a' + clip(eps, -c, c), -1, 1)``."""
        actions = super()._target_actions(group, next_obs, weights)
        first = cast(MATD3, group.members[0])
        sizes = _sizes(weights)
        for agent in first.box_agents:
            action = actions[agent]
            noise = np.zeros(tuple(action.shape), dtype=np.float64)
            for index, (member, size) in enumerate(zip(group.members, sizes, strict=True)):
                if size:
                    draw = member.rng.normal(0.0, member.policy_noise, size=(size, action.shape[-1]))
                    noise[index, :size] = np.clip(draw, -member.noise_clip, member.noise_clip)
            actions[agent] = (action + torch.as_tensor(noise, dtype=action.dtype, device=action.device)).clamp(-1, 1)
        return actions
