"""A group of same-architecture DQN agents acting and learning as one stacked computation.

Each member keeps its own hyperparameters, exactly: batch size (smaller batches are padded and
weighted out of the loss), learning rate and Adam state, gamma, tau, gradient clipping and its
own sampling RNG. One learning step of the group equals one ``DQN.learn`` per member on the same
batches (to float rounding; tested). Plain MLP Q networks run as a
:class:`~agile_core.networks.fused.FusedMLPChain` (one forward call for the batch and its
bootstrap observations, a hand-written backward pass); other stackable networks use autograd. Build a group at the start of a training phase and call
:meth:`DQNGroup.copy_to_members` at its end, before anything else reads the agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_core.networks import preprocess_tensor_observation
from agile_core.networks.fused import FusedMLPChain
from agile_core.networks.q_networks import QNetwork
from agile_core.networks.stacked import (
    FlatParameters,
    NotStackableError,
    copy_to_members,
    stack_modules,
)
from agile_core.networks.stacked_adam import StackedAdam, clip_flat_grad_norm
from agile_offpolicy.buffers import ReplayBuffer
from agile_offpolicy.dqn import DQN, td_loss
from agile_offpolicy.stacked_group import finish_learning_step, sample_padded, soft_update_flat

__all__ = ["DQNGroup"]

BATCHABLE_OBSERVATIONS = (spaces.Box, spaces.Discrete)


class DQNGroup:
    """Stacked Q networks, target networks and Adam of `members` (plain DQN agents).

    Args:
        members: The agents, all plain :class:`DQN` with the same network architecture.
        fused: Run MLP Q networks as fused chains (the default); False always uses autograd.
    """

    def __init__(self, members: Sequence[DQN], fused: bool = True) -> None:
        first = members[0]
        if any(type(member) is not DQN for member in members):
            raise NotStackableError("only plain DQN agents are grouped")
        if not isinstance(first.observation_space, BATCHABLE_OBSERVATIONS):
            raise NotStackableError(f"observation space {type(first.observation_space).__name__} is not batched")
        if len({(m.double, m.normalize_images, str(m.device), m.num_actions, m.action_start) for m in members}) != 1:
            raise NotStackableError("the members differ in double, normalize_images, device or actions")
        self.members = list(members)
        self.actor = stack_modules([m.actor for m in members])
        self.actor_target = stack_modules([m.actor_target for m in members])
        self.actor_target.requires_grad_(False)
        self.optimizer = StackedAdam(self.actor, [m.actor for m in members], [m.optimizer for m in members])
        self.target_flat = FlatParameters(self.actor_target, with_grad=False)
        self.device = first.device
        self.space = first.observation_space
        self.normalize_images = first.normalize_images
        self.double = first.double
        self.max_grad_norm = first.max_grad_norm
        self.loss = first.loss
        self.gamma = torch.tensor([m.gamma for m in members], dtype=torch.float32, device=self.device).unsqueeze(1)
        self.tau = torch.tensor([m.tau for m in members], dtype=torch.float32, device=self.device).unsqueeze(1)
        self.chain = self.target_chain = None
        if fused:
            try:
                self.chain, self.target_chain = _fused_chain(self.actor), _fused_chain(self.actor_target)
            except NotStackableError:
                self.chain = self.target_chain = None

    def __len__(self) -> int:
        return len(self.members)

    def _inputs(self, obs: Any) -> torch.Tensor:
        return preprocess_tensor_observation(self.space, obs, self.device, self.normalize_images)

    def q_values(self, obs: Any) -> torch.Tensor:
        """Q values ``[P, rows, n]`` of observations ``[P, rows, ...]`` (no gradient)."""
        if self.chain is not None:
            return self.chain.forward(self._inputs(obs))
        with torch.no_grad():
            return self.actor(self._inputs(obs))

    def act(self, obs: Any, epsilons: Sequence[float], action_masks: Any = None, training: bool = True) -> np.ndarray:
        """Epsilon-greedy actions ``[P * rows]`` for observations ``[P * rows, ...]`` (member-major);
        without `training`, epsilon is 0 (greedy) for every member."""
        members = len(self.members)
        if not training:
            epsilons = [0.0] * members
        obs_tensor = torch.as_tensor(np.asarray(obs), device=self.device)
        q_values = self.q_values(obs_tensor.reshape(members, -1, *obs_tensor.shape[1:]))
        if action_masks is not None:
            masks = np.asarray(action_masks).reshape(members, q_values.shape[1], -1)
            return np.concatenate([member.epsilon_greedy(q_values[index], epsilons[index], masks[index])
                                   for index, member in enumerate(self.members)])
        greedy = q_values.argmax(dim=-1).cpu().numpy()
        return np.concatenate([member.explore(greedy[index], epsilons[index])
                               for index, member in enumerate(self.members)])

    # ------------------------------------------------------------------ learning
    def sample(self, memory: ReplayBuffer, active: Sequence[bool]) -> tuple[Any, ...]:
        """One batch per active member, drawn with the member's own RNG exactly as the one-by-one
        loop draws it, gathered in one call and laid out ``[P, max_batch, ...]`` (padded rows
        repeat row 0 and carry zero loss weight)."""
        return sample_padded(memory, self.members, active, self.device)

    def learn(self, batch: tuple[Any, ...], active: Sequence[bool]) -> list[float | None]:
        """One gradient step for every active member; return each member's loss (None if idle)."""
        obs, actions, rewards, next_obs, done, weights = batch
        first = self.members[0]
        actions = torch.as_tensor(actions, device=self.device).long().reshape(*weights.shape, 1) - first.action_start
        rewards = torch.as_tensor(rewards, device=self.device, dtype=torch.float32).reshape(weights.shape)
        done = torch.as_tensor(done, device=self.device, dtype=torch.float32).reshape(weights.shape)
        self.optimizer.zero_grad()
        if self.chain is not None:
            losses = self._fused_losses_and_grads(obs, actions, rewards, next_obs, done, weights, active)
        else:
            losses = self._autograd_losses_and_grads(obs, actions, rewards, next_obs, done, weights)
        self.optimizer.mask_padding()
        if self.max_grad_norm is not None:
            clip_flat_grad_norm(self.optimizer.flat, self.max_grad_norm)
        self.optimizer.step(None if all(active) else active)
        soft_update_flat(self.target_flat, self.optimizer.parameters, self.tau, active)  # idle members unchanged
        return finish_learning_step(self.members, active, [float(value) for value in losses.tolist()])

    def _td_target(self, next_q_target: torch.Tensor, chooser: torch.Tensor, rewards: torch.Tensor,
                   done: torch.Tensor, gamma: torch.Tensor | None = None) -> torch.Tensor:
        next_q = next_q_target.gather(-1, chooser.argmax(dim=-1, keepdim=True)).squeeze(-1)
        return rewards + (self.gamma if gamma is None else gamma) * (1.0 - done) * next_q

    def _fused_losses_and_grads(self, obs: Any, actions: torch.Tensor, rewards: torch.Tensor, next_obs: Any,
                                done: torch.Tensor, weights: torch.Tensor, active: Sequence[bool]) -> torch.Tensor:
        """Per-member losses ``[P]``, with their gradients written into the stacked parameters.

        Only the smallest range of members that holds every active one is computed (members are
        grouped by learn step, so a round that only the busiest members take is a short range)."""
        assert self.chain is not None and self.target_chain is not None
        start, stop = _active_range(active)
        chain, target_chain, gamma = self.chain, self.target_chain, self.gamma
        if stop - start < len(self.members):
            chain, target_chain = chain.members(start, stop), target_chain.members(start, stop)
            gamma = gamma[start:stop]
            obs, next_obs = obs[start:stop], next_obs[start:stop]
            actions, rewards, done, weights = (t[start:stop] for t in (actions, rewards, done, weights))
        rows = weights.shape[1]
        inputs, next_inputs = self._inputs(obs), self._inputs(next_obs)
        tape: list[Any] = []
        if self.double:  # one online call for the batch and the rows it bootstraps from
            q_all = chain.forward(torch.cat([inputs, next_inputs], dim=1), tape)
            q, chooser = q_all[:, :rows], q_all[:, rows:]
            next_q_target = target_chain.forward(next_inputs)
        else:
            q = chain.forward(inputs, tape)
            chooser = next_q_target = target_chain.forward(next_inputs)
        td_target = self._td_target(next_q_target, chooser, rewards, done, gamma)
        q_taken = q.gather(-1, actions).squeeze(-1)
        losses = (td_loss(q_taken, td_target, self.loss, reduction="none") * weights).sum(dim=1)
        # d losses.sum() / d q_taken is the loss derivative times each row's weight
        if self.loss == "mse":
            row_grads = 2.0 * (q_taken - td_target) * weights
        else:
            row_grads = torch.ops.aten.smooth_l1_loss_backward.default(weights, q_taken, td_target, 0, 1.0)
        q_grads = torch.zeros_like(q).scatter_(-1, actions, row_grads.unsqueeze(-1))
        chain.backward(tape, q_grads, rows if self.double else None)
        if stop - start == len(self.members):
            return losses
        every = losses.new_zeros(len(self.members))  # members outside the range are idle
        every[start:stop] = losses
        return every

    def _autograd_losses_and_grads(self, obs: Any, actions: torch.Tensor, rewards: torch.Tensor, next_obs: Any,
                                   done: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The same as :meth:`_fused_losses_and_grads` through the stacked modules and autograd."""
        with torch.no_grad():
            next_inputs = self._inputs(next_obs)
            next_q_target = self.actor_target(next_inputs)
            chooser = self.actor(next_inputs) if self.double else next_q_target
            td_target = self._td_target(next_q_target, chooser, rewards, done)
        q_taken = self.actor(self._inputs(obs)).gather(-1, actions).squeeze(-1)
        losses = (td_loss(q_taken, td_target, self.loss, reduction="none") * weights).sum(dim=1)
        losses.sum().backward()
        return losses.detach()

    def copy_to_members(self) -> None:
        """Write weights, target weights and Adam state back into the member agents."""
        copy_to_members(self.actor, [m.actor for m in self.members])
        copy_to_members(self.actor_target, [m.actor_target for m in self.members])
        self.optimizer.copy_to_members()


def _active_range(active: Sequence[bool]) -> tuple[int, int]:
    """``(start, stop)``: the smallest contiguous range of members holding every active one."""
    flags = list(active)
    start = flags.index(True)
    return start, len(flags) - flags[::-1].index(True)


def _fused_chain(network: torch.nn.Module) -> FusedMLPChain:
    """The fused version of a stacked feed-forward MLP :class:`QNetwork` (encoder then head)."""
    if type(network) is not QNetwork or network.recurrent:
        raise NotStackableError("only feed-forward QNetworks run fused")
    return FusedMLPChain([network.encoder, network.head])
