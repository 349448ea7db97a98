"""PPO's forward pass for a group of members on network inputs ``[P, rows, ...]``: policy-head
outputs, values and the new recurrent state, and the acting rule built on them.

A stacked group runs its stacked networks; a group of one that does not stack (recurrent,
convolutional...) runs the member's own networks on its rows and gives back a member axis of 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch

from agile_core.algorithms.group import MemberGroup
from agile_core.networks import EvolvableMLP, StochasticActor, ValueNetwork
from agile_core.training.tensor_tree import map_tree
from agile_onpolicy.ppo_hidden import (
    HiddenStates,
    member_axis,
    population_hidden,
    recurrent_networks,
)
from agile_onpolicy.ppo_networks import SharedActorCritic

if TYPE_CHECKING:
    from agile_onpolicy.ppo import PPO

__all__ = ["PolicyStep", "group_heads", "group_values", "latent_heads", "policy_of", "policy_step"]

Heads = tuple[torch.Tensor, torch.Tensor | None, HiddenStates | None]
"""Policy-head outputs (or the latent), values (or None) and the new recurrent state (or None)."""


class PolicyStep(NamedTuple):
    """What :meth:`PPO.act_population` gives for inputs ``[P, rows, ...]``: raw actions
    ``[P, rows, ...]``, their log-probabilities and the values ``[P, rows]`` (None when not asked
    for), the new recurrent state (``[P, layers, rows, H]`` leaves; None unless recurrent) and the
    action distribution."""

    action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor | None
    hidden: HiddenStates | None
    distribution: Any


def policy_of(group: MemberGroup) -> StochasticActor:
    """The actor whose distributions a group's head outputs parameterise."""
    return cast(StochasticActor, group.nets["actor"] if group.stacked else cast("PPO", group.members[0]).actor)


def value_head(agent: PPO) -> EvolvableMLP:
    """The head mapping the agent's critic latent to ``V(s)``."""
    head = agent.actor.value_head if agent.share_encoders else agent.critic.head
    return cast(EvolvableMLP, head)


def encode_step(agent: PPO, obs: Any,
                hidden: HiddenStates | None) -> tuple[torch.Tensor, torch.Tensor, HiddenStates | None]:
    """Actor latent, critic latent and the new recurrent state of one step of `obs` through the
    agent's own encoders (zero state when `hidden` is None)."""
    if not agent.recurrent:
        latent = agent.actor.encode(obs)[0]
        critic_latent = latent if agent.share_encoders else agent.critic.encode(obs)[0]
        return latent, critic_latent, None
    batch = obs.shape[0]
    hidden = hidden if hidden is not None else agent.initial_hidden(batch)
    hidden = agent.fit_hidden(hidden)
    latent, actor_state = agent.actor.encode(obs, hidden["actor"])
    new_hidden: HiddenStates = {"actor": actor_state}  # type: ignore[dict-item]
    if agent.share_encoders:
        return latent, latent, new_hidden
    critic_latent, critic_state = agent.critic.encode(obs, hidden["critic"])
    new_hidden["critic"] = critic_state  # type: ignore[assignment]
    return latent, critic_latent, new_hidden


def group_heads(group: MemberGroup, inputs: Any, hidden_state: HiddenStates | None = None, *,
                policy: bool = True, critic: bool = True) -> Heads:
    """Policy-head outputs ``[P, rows, n]`` (the latent without `policy`), values ``[P, rows]``
    (when `critic`) and the new recurrent state of network inputs ``[P, rows, ...]``."""
    if not group.stacked:
        return _member_heads(cast("PPO", group.members[0]), inputs, hidden_state, policy=policy, critic=critic)
    actor = cast(StochasticActor, group.nets["actor"])
    separate = cast(ValueNetwork | None, group.nets.get("critic"))
    if actor.recurrent:
        return _recurrent_heads(group, inputs, hidden_state, policy=policy, critic=critic)
    if separate is not None:  # encoder and head of each network as one (fused) chain
        heads = actor.head_of_latent(inputs) if policy else actor.encode(inputs)[0]
        return heads, separate.head_of_latent(inputs).squeeze(-1) if critic else None, None
    if policy and critic:  # the shared encoder runs once for both heads
        heads, value = actor.heads_of_latent(inputs, ("head", "value_head"))
        return heads, value.squeeze(-1), None
    if not critic:  # the encoder and the policy head as one (fused) chain
        return (actor.head_of_latent(inputs) if policy else actor.encode(inputs)[0]), None, None
    latent = actor.encode(inputs)[0]  # values without the policy: the latent stands for the heads
    return latent, cast(SharedActorCritic, actor).value_head(latent).squeeze(-1), None


def _member_heads(member: PPO, inputs: Any, hidden_state: HiddenStates | None, *,
                  policy: bool, critic: bool) -> Heads:
    """:func:`group_heads` of a group of one that does not stack: the member's own networks."""
    latent, critic_latent, hidden = encode_step(member, map_tree(lambda leaf: leaf.squeeze(0), inputs),
                                                member_axis(hidden_state, add=False))
    heads = member.actor.head(latent).unsqueeze(0) if policy else latent
    value = value_head(member)(critic_latent).squeeze(-1).unsqueeze(0) if critic else None
    return heads, value, member_axis(hidden, add=True)


def _recurrent_heads(group: MemberGroup, inputs: torch.Tensor, hidden_state: HiddenStates | None, *,
                     policy: bool, critic: bool) -> Heads:
    """:func:`group_heads` of a stacked recurrent group for one step: the LSTM encoders advance
    from `hidden_state` (zeros when None); a separate critic runs only when values are asked for."""
    nets = recurrent_networks(group)
    if hidden_state is None:
        hidden_state = population_hidden(group, inputs.shape[1])
    new: HiddenStates = {}
    latents: dict[str, torch.Tensor] = {}
    for name, net in nets.items():
        if name == "critic" and not critic:
            continue
        latents[name], new[name] = net.encode(inputs, hidden_state[name])  # type: ignore[assignment]
    heads, value = latent_heads(group, latents["actor"], latents.get("critic", latents["actor"]),
                                policy=policy, critic=critic)
    return heads, value, new


def latent_heads(group: MemberGroup, latent: torch.Tensor, critic_latent: torch.Tensor, *,
                 policy: bool = True, critic: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Policy-head outputs (the latent itself without `policy`) and values ``[P, rows]`` (when
    `critic`) of the members' latents ``[P, rows, D]``."""
    if group.stacked:
        actor = cast(StochasticActor, group.nets["actor"])
        head = cast(ValueNetwork, group.nets["critic"]).head if "critic" in group.nets else \
            cast(SharedActorCritic, actor).value_head
        heads = actor.head(latent) if policy else latent
        return heads, head(critic_latent).squeeze(-1) if critic else None
    member = cast("PPO", group.members[0])
    heads = member.actor.head(latent[0]).unsqueeze(0) if policy else latent
    return heads, value_head(member)(critic_latent[0]).squeeze(-1).unsqueeze(0) if critic else None


def policy_step(group: MemberGroup, inputs: Any, action_masks: torch.Tensor | None = None,
                training: bool = True, *, hidden_state: HiddenStates | None = None,
                values: bool = True) -> PolicyStep:
    """The policy of every member on network inputs ``[P, rows, ...]`` (see :meth:`PPO.act_population`)."""
    with torch.no_grad():
        heads, value, hidden = group_heads(group, inputs, hidden_state, critic=values)
        dist = policy_of(group).distribution_from_head(heads, action_masks)
        action = dist.sample() if training else dist.mode()
        return PolicyStep(action, dist.log_prob(action), value, hidden, dist)


def group_values(group: MemberGroup, inputs: Any, hidden_state: HiddenStates | None = None) -> torch.Tensor:
    """``V(s)`` ``[P, rows]`` of every member for network inputs ``[P, rows, ...]``."""
    with torch.no_grad():
        value = group_heads(group, inputs, hidden_state, policy=False)[1]
    assert value is not None
    return value
