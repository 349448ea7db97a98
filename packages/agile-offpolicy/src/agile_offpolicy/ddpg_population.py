"""A group of same-architecture DDPG (or TD3) agents acting and learning as one stacked computation.

Each member keeps its own hyperparameters, exactly: batch size (smaller batches are padded and
weighted out of the losses), actor and critic learning rates and Adam states, gamma, tau,
``policy_freq`` (with its own learn counter), TD3's ``policy_noise`` / ``noise_clip`` drawn from its
own RNG, and its own exploration noise process. One learning step of the group equals one
``agent.learn(memory.sample(agent.batch_size, agent.rng))`` per active member (to float rounding;
tested).

Layout: the actors' encoders and heads are stacked (``[P, ...]``; the actor's action bounds are
applied here, as :class:`~agile_core.networks.DeterministicActor` does). The critics of all members
are stacked into one module of ``K * P`` rows (``K`` critics per agent; row ``k * P + p`` is member
``p``'s ``k``-th critic), so TD3's twin critics run as one batched call, and one
:class:`~agile_core.networks.stacked_adam.StackedAdam` mirrors each member's single critic optimizer
over both. Members whose latent widths differ are supported: each critic head reads its member's
own latent units followed by the action. Build a group at the start of a training phase and call
:meth:`DDPGGroup.copy_to_members` at its end, before anything else reads the agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agile_core.networks import preprocess_tensor_observation
from agile_core.networks.mlp import EvolvableMLP
from agile_core.networks.stacked import (
    FlatParameters,
    NotStackableError,
    copy_to_members,
    stack_modules,
    structure_key,
)
from agile_core.networks.stacked_adam import StackedAdam
from agile_offpolicy.buffers import ReplayBuffer
from agile_offpolicy.ddpg import DDPG
from agile_offpolicy.stacked_group import finish_learning_step, sample_padded, soft_update_flat
from agile_offpolicy.td3 import TD3

__all__ = ["DDPGGroup"]


class DDPGGroup:
    """Stacked actors, critics, their targets and Adam states of `members` (plain DDPG or plain TD3).

    Args:
        members: The agents, all plain :class:`DDPG` or all plain :class:`TD3`, whose networks have
            the same structure (widths may differ).

    Raises:
        NotStackableError: for anything the group does not run (other agent types, non-Box
            observations, non-MLP encoders, members differing in action space, device or
            ``share_encoders``): train those agents one by one.
    """

    def __init__(self, members: Sequence[DDPG]) -> None:
        first = members[0]
        kind = type(first)
        if kind not in (DDPG, TD3) or any(type(member) is not kind for member in members):
            raise NotStackableError("only plain DDPG or plain TD3 agents (one type per group) are grouped")
        if not isinstance(first.observation_space, spaces.Box):
            raise NotStackableError(f"observation space {type(first.observation_space).__name__} is not batched")
        if len({self.settings_key(member) for member in members}) != 1:
            raise NotStackableError("the members differ in spaces, device, normalize_images or share_encoders")
        networks = [network for member in members for pair in member.target_pairs() for network in pair]
        if any(type(net.encoder) is not EvolvableMLP or type(net.head) is not EvolvableMLP for net in networks):
            raise NotStackableError("only MLP encoders and heads are batched")
        if first.share_encoders and any(critic.encoder.config != member.actor.encoder.config
                                        for member in members for critic in member.critics):
            raise NotStackableError("share_encoders with critic encoders unlike the actor's is not batched")
        self.members = list(members)
        self.twin = kind is TD3
        self.critic_count = len(kind.critic_names)
        self.share_encoders = first.share_encoders
        self.device = first.device
        self.space = first.observation_space
        self.normalize_images = first.normalize_images
        self.action_shape = first.action_shape
        self.action_dim = first.action_dim
        self.action_dtype = first.action_space.dtype
        self.centre, self.half_range = first._centre, first._half_range
        self.action_low, self.action_high = first.actor.action_low, first.actor.action_high

        actors = [member.actor for member in members]
        self.actor = _stack_actor(actors)
        self.actor_target = _stack_actor([member.actor_target for member in members])
        critics = [member.critics[k] for k in range(self.critic_count) for member in members]
        critic_targets = [member.critic_targets[k] for k in range(self.critic_count) for member in members]
        self.critic = stack_modules(critics)
        self.critic_target = stack_modules(critic_targets)
        self.actor_target.requires_grad_(False)
        self.critic_target.requires_grad_(False)
        self._critic_members = critics
        self.actor_optimizer = StackedAdam(self.actor, actors, [member.actor_optimizer for member in members])
        self.critic_optimizer = StackedAdam(self.critic, critics,
                                            [member.critic_optimizer for _ in range(self.critic_count)
                                             for member in members])
        self.actor_target_flat = FlatParameters(self.actor_target, with_grad=False)
        self.critic_target_flat = FlatParameters(self.critic_target, with_grad=False)
        self.head_columns = _head_columns([critic.head.num_inputs - self.action_dim for critic in critics],
                                          self.action_dim, self.device)

        def column(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=self.device).unsqueeze(1)

        self.gamma = column([member.gamma for member in members]).unsqueeze(2)  # [P, 1, 1]
        self.tau = column([member.tau for member in members])
        self.critic_tau = self.tau.repeat(self.critic_count, 1)

    @staticmethod
    def settings_key(agent: DDPG) -> str:
        """What members of one group must share beyond their network structure."""
        return repr((type(agent).__name__, agent.observation_space, agent.action_space, str(agent.device),
                     agent.normalize_images, agent.share_encoders))

    @classmethod
    def group_key(cls, agent: DDPG) -> str:
        """Agents with equal keys can form one group."""
        return "|".join([cls.settings_key(agent), structure_key(agent.actor),
                         *(structure_key(critic) for critic in agent.critics)])

    def __len__(self) -> int:
        return len(self.members)

    # ------------------------------------------------------------------ networks
    def _observation(self, obs: Any) -> torch.Tensor:
        """Float observations ``[P, rows, *obs_shape]`` from raw ``[P, rows, *obs_shape]``."""
        return preprocess_tensor_observation(self.space, obs, self.device, self.normalize_images)

    def _actions(self, actor: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[P, rows, action_dim]`` of a stacked actor within the bounds (``DeterministicActor.forward``)."""
        encoder, head = _parts(actor)
        squashed = head(encoder(obs))
        action = self.action_low + (squashed + 1.0) * 0.5 * (self.action_high - self.action_low)
        return torch.minimum(torch.maximum(action, self.action_low), self.action_high)

    def _policy(self, actor: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        """Normalised actions ``[P, rows, action_dim]`` of a stacked actor (``DDPG._policy``)."""
        return (self._actions(actor, obs) - self.centre) / self.half_range

    def _q_values(self, critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``Q_k(s, a)`` ``[K, P, rows]`` of the stacked critics for ``[P, rows, ...]`` inputs."""
        repeat = self.critic_count
        obs_rows = obs if repeat == 1 else torch.cat([obs] * repeat)
        action_rows = actions if repeat == 1 else torch.cat([actions] * repeat)
        encoder, head = _parts(critic)
        latent = encoder(obs_rows)
        if self.head_columns is None:
            inputs = torch.cat([latent, action_rows], dim=-1)
        else:  # each row's own latent units, then the action, then zero padding
            padding = latent.new_zeros(*latent.shape[:-1], 1)
            source = torch.cat([latent, action_rows, padding], dim=-1)
            inputs = source.gather(-1, self.head_columns.expand(-1, source.shape[1], -1))
        return head(inputs).reshape(repeat, len(self.members), -1)

    # ------------------------------------------------------------------ acting
    def act(self, obs: Any, epsilons: Sequence[float], action_masks: Any = None, training: bool = True) -> np.ndarray:
        """Actions ``[P * rows, *action_shape]`` for observations ``[P * rows, ...]`` (member-major):
        one stacked actor call, then (with `training`) each member's own exploration exactly as
        its ``get_action(obs, epsilon=...)`` explores; greedy without `training`."""
        if action_masks is not None:
            raise ValueError("DDPG and TD3 act in a Box action space, which takes no action_mask")
        members = len(self.members)
        obs_array = np.asarray(obs)
        inputs = self._observation(obs_array.reshape(members, -1, *obs_array.shape[1:]))
        with torch.no_grad():
            action = self._actions(self.actor, inputs)
        actions = action.reshape(members, -1, *self.action_shape).cpu().numpy().astype(np.float64)
        if not training:
            return actions.reshape(-1, *self.action_shape).astype(self.action_dtype, copy=False)
        return np.concatenate([member.explore(actions[index], epsilons[index])
                               for index, member in enumerate(self.members)])

    # ------------------------------------------------------------------ learning
    def sample(self, memory: ReplayBuffer, active: Sequence[bool]) -> tuple[Any, ...]:
        """One batch per active member, drawn with its own RNG exactly as the one-by-one loop
        draws it, laid out ``[P, max_batch, ...]`` with loss weights (see ``sample_padded``)."""
        return sample_padded(memory, self.members, active, self.device)

    def learn(self, batch: tuple[Any, ...], active: Sequence[bool]) -> list[dict[str, float] | None]:
        """One learning step for every active member (critic update; actor and target update for
        the members whose learn counter reaches a multiple of their ``policy_freq``); return each
        member's losses (``critic``, plus ``actor`` when updated), None for idle members."""
        obs, actions, rewards, next_obs, done, weights = batch
        members, rows = weights.shape
        obs, next_obs = self._observation(obs), self._observation(next_obs)
        actions = torch.as_tensor(actions, device=self.device, dtype=torch.float32).reshape(members, rows, -1)
        actions = (actions - self.centre) / self.half_range
        rewards = torch.as_tensor(rewards, device=self.device, dtype=torch.float32).reshape(members, rows, 1)
        done = torch.as_tensor(done, device=self.device, dtype=torch.float32).reshape(members, rows, 1)
        weights = weights.unsqueeze(0)  # [1, P, rows], broadcast over the critics
        policy_due = [on and (member.learn_counter + 1) % member.policy_freq == 0
                      for member, on in zip(self.members, active, strict=True)]

        with torch.no_grad():
            next_actions = self._policy(self.actor_target, next_obs)
            if self.twin:
                next_actions = (next_actions + self._smoothing_noise(active, rows)).clamp(-1.0, 1.0)
            bootstrap = self._q_values(self.critic_target, next_obs, next_actions).amin(dim=0)  # [P, rows]
            td_target = rewards + self.gamma * (1.0 - done) * bootstrap.unsqueeze(-1)
        critic_losses = self._update_critics(obs, actions, td_target.squeeze(-1), weights, active)
        actor_losses = self._update_actor(obs, weights[0], policy_due) if any(policy_due) else None
        if any(policy_due):
            soft_update_flat(self.actor_target_flat, self.actor_optimizer.parameters, self.tau, policy_due)
            soft_update_flat(self.critic_target_flat, self.critic_optimizer.parameters, self.critic_tau,
                             list(policy_due) * self.critic_count)
        if self.share_encoders:
            self._share_encoder_weights(active)
        losses: list[dict[str, float]] = []
        for index, due in enumerate(policy_due):
            losses.append({"critic": critic_losses[index]})
            if due and actor_losses is not None:
                losses[-1]["actor"] = actor_losses[index]
        return finish_learning_step(self.members, active, losses)

    def _smoothing_noise(self, active: Sequence[bool], rows: int) -> torch.Tensor:
        """TD3's target smoothing noise ``[P, rows, action_dim]``: each active member's clipped
        Gaussian draw from its own ``rng``, as ``TD3._target_policy_action`` draws it; zero elsewhere."""
        noise = np.zeros((len(self.members), rows, self.action_dim), dtype=np.float64)
        for index, (member, on) in enumerate(zip(self.members, active, strict=True)):
            if on:
                assert isinstance(member, TD3)
                draw = member.rng.normal(0.0, member.policy_noise, size=(member.batch_size, self.action_dim))
                noise[index, :member.batch_size] = np.clip(draw, -member.noise_clip, member.noise_clip)
        return torch.as_tensor(noise, dtype=torch.float32, device=self.device)

    def _update_critics(self, obs: torch.Tensor, actions: torch.Tensor, td_target: torch.Tensor,
                        weights: torch.Tensor, active: Sequence[bool]) -> list[float]:
        """Regress every critic on its member's TD target (one Adam step per active member over all
        its critics); return each member's summed MSE."""
        self.critic_optimizer.zero_grad()
        errors = (self._q_values(self.critic, obs, actions) - td_target).square() * weights
        losses = errors.sum(dim=(0, 2))
        losses.sum().backward()
        self.critic_optimizer.mask_padding()
        self.critic_optimizer.step(None if all(active) else list(active) * self.critic_count)
        return [float(value) for value in losses.tolist()]

    def _update_actor(self, obs: torch.Tensor, weights: torch.Tensor, due: Sequence[bool]) -> list[float]:
        """Deterministic policy gradient step on ``Q_1(s, mu(s))`` for the `due` members; return
        every member's actor loss (only the due members' are meaningful)."""
        self.actor_optimizer.zero_grad()
        self.critic.requires_grad_(False)  # the gradient flows through the critics into the actors only
        try:
            q_values = self._q_values(self.critic, obs, self._policy(self.actor, obs))[0]
            losses = -(q_values * weights).sum(dim=1)
            losses.sum().backward()
        finally:
            self.critic.requires_grad_(True)
        self.actor_optimizer.mask_padding()
        self.actor_optimizer.step(None if all(due) else due)
        return [float(value) for value in losses.tolist()]

    def _share_encoder_weights(self, active: Sequence[bool]) -> None:
        """Copy each active member's actor encoder into its critic encoders (``DDPG._share_encoder_weights``)."""
        rows = torch.tensor([index for index, on in enumerate(active) if on], device=self.device)
        if rows.numel() == 0:
            return
        members = len(self.members)
        with torch.no_grad():
            for source, dest in zip(_parts(self.actor)[0].parameters(), _parts(self.critic)[0].parameters(),
                                    strict=True):
                dest.data.view(self.critic_count, members, *source.shape[1:])[:, rows] = source.data[rows]

    def copy_to_members(self) -> None:
        """Write weights, target weights and Adam states back into the member agents (their learn
        counters are already current)."""
        copy_to_members(self.actor, [member.actor for member in self.members])
        copy_to_members(self.actor_target, [member.actor_target for member in self.members])
        copy_to_members(self.critic, self._critic_members)
        copy_to_members(self.critic_target, [member.critic_targets[k] for k in range(self.critic_count)
                                             for member in self.members])
        self.actor_optimizer.copy_to_members()
        self.critic_optimizer.copy_to_members()


def _parts(stacked: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The (encoder, head) of a stacked network."""
    return cast(nn.Module, stacked.encoder), cast(nn.Module, stacked.head)


def _stack_actor(actors: Sequence[nn.Module]) -> nn.Module:
    """The actors' encoders and heads stacked and held together (``encoder``, ``head``) under the
    actors' own parameter names; the action bounds (buffers) are applied by the group."""
    return nn.ModuleDict({part: stack_modules([cast(nn.Module, getattr(actor, part)) for actor in actors])
                          for part in ("encoder", "head")})


def _head_columns(latent_dims: Sequence[int], action_dim: int, device: torch.device | str) -> torch.Tensor | None:
    """Where each stacked critic row's head input comes from in ``cat([latent, action, 0])``
    (``[rows, 1, width]``), or None when all rows have the same latent width (a plain concat)."""
    if len(set(latent_dims)) == 1:
        return None
    widest = max(latent_dims)
    columns = torch.full((len(latent_dims), widest + action_dim), widest + action_dim, dtype=torch.long)
    for row, width in enumerate(latent_dims):
        columns[row, :width] = torch.arange(width)
        columns[row, width:width + action_dim] = torch.arange(widest, widest + action_dim)
    return columns.unsqueeze(1).to(device)
