"""A group of same-architecture PPO agents acting and learning as one stacked computation.

The members' actors (and critics, without shared encoders) run as stacked modules and one
:class:`~agile_core.networks.stacked_adam.StackedAdam` updates all of them. Every member keeps its
own learning rule exactly: its learning rate and Adam state, ``batch_size`` (smaller minibatches
are padded and weighted out of the loss), ``update_epochs``, ``clip_coef``, ``ent_coef``,
``vf_coef``, ``max_grad_norm``, ``target_kl`` (a member whose KL exceeds its target stops, the
others go on), ``normalize_advantages`` and ``clip_vloss``, and its minibatch order, drawn from its
own ``rng`` exactly as :meth:`PPO.learn` draws it. Learning a group equals one ``PPO.learn`` per
member on the same rollouts (to float rounding; tested).

MLP networks run as :class:`~agile_core.networks.fused.FusedMLPChain` s: the encoders and heads
without autograd, and only the loss on top of the head outputs (distribution, clipped surrogate,
value error, entropy) through autograd, whose output gradients the chains then carry back by hand.

Each member's gradient steps run back to back across its epochs, so the group takes as many
steps as its busiest member, not the sum. Supported: feed-forward PPO agents with Discrete,
MultiDiscrete or MultiBinary actions over vector (Box, Discrete, MultiDiscrete, MultiBinary)
observations. Box actions (the actor owns its Gaussian ``log_std`` directly), recurrent agents and
image encoders raise :class:`~agile_core.networks.stacked.NotStackableError`; run those one by
one. Build a group after any mutation (it copies the hyperparameters) and call
:meth:`PPOGroup.copy_to_members` before anything else reads the agents.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agile_core.networks import StochasticActor, ValueNetwork, preprocess_tensor_observation
from agile_core.networks.fused import FusedMLPChain, Tape
from agile_core.networks.stacked import (
    NotStackableError,
    copy_to_members,
    stack_modules,
    structure_key,
)
from agile_core.networks.stacked_adam import StackedAdam, clip_flat_grad_norm
from agile_core.training.population import pad_index_batches
from agile_onpolicy.ppo import LOSS_NAMES, PPO, SharedActorCritic
from agile_onpolicy.rollout import RolloutBuffer

__all__ = ["PPOGroup", "group_key"]

VECTOR_OBSERVATIONS = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
STACKED_ACTIONS = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def group_key(agent: PPO) -> str:
    """Equal for two PPO agents exactly when their networks can be stacked together."""
    key = structure_key(agent.actor)
    return key if agent.share_encoders else f"{key}|{structure_key(agent.critic)}"


_FusedHeads = tuple[list[Tape], torch.Tensor, torch.Tensor]
"""Tapes of a fused forward pass and its head outputs and values (the autograd leaves)."""


def _grad_or_zeros(leaf: torch.Tensor) -> torch.Tensor:
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)


@dataclass
class _Rollouts:
    """The learning members' rollouts laid out ``[P, rows, ...]`` (zero-padded to the longest)."""

    inputs: torch.Tensor
    actions: torch.Tensor
    scalars: torch.Tensor  # [P, rows, 4]: old log-prob, old value, advantage, return
    masks: torch.Tensor | None


class _FusedNetworks:
    """A group's stacked actor and critic as fused chains: encoder(s), then policy and value heads."""

    def __init__(self, actor: StochasticActor, critic: ValueNetwork | None) -> None:
        if type(actor) not in (StochasticActor, SharedActorCritic) or (critic is not None and
                                                                        type(critic) is not ValueNetwork):
            raise NotStackableError("only plain actor and value networks run fused")
        self.encoder = FusedMLPChain([actor.encoder])
        self.head = FusedMLPChain([actor.head])
        self.critic_encoder = None if critic is None else FusedMLPChain([critic.encoder])
        value_head = cast(SharedActorCritic, actor).value_head if critic is None else critic.head
        self.value_head = FusedMLPChain([value_head])

    def forward(self, inputs: torch.Tensor, tapes: list[Tape] | None = None,
                critic: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Policy head outputs ``[P, rows, n]`` and (when `critic`) values ``[P, rows, 1]``; pass four
        empty `tapes` to record what :meth:`backward` needs."""
        encoder_tape, head_tape, critic_tape, value_tape = tapes if tapes is not None else (None,) * 4
        latent = self.encoder.forward(inputs, encoder_tape)
        outputs = self.head.forward(latent, head_tape)
        if not critic:
            return outputs, None
        if self.critic_encoder is not None:
            latent = self.critic_encoder.forward(inputs, critic_tape)
        return outputs, self.value_head.forward(latent, value_tape)

    def backward(self, tapes: list[Tape], output_grad: torch.Tensor, value_grad: torch.Tensor) -> None:
        """Accumulate the parameter gradients of ``sum(output_grad * outputs + value_grad * values)``."""
        encoder_tape, head_tape, critic_tape, value_tape = tapes
        latent_grad = self.head.backward(head_tape, output_grad, input_grad=True)
        critic_latent_grad = self.value_head.backward(value_tape, value_grad, input_grad=True)
        assert latent_grad is not None and critic_latent_grad is not None
        if self.critic_encoder is None:
            self.encoder.backward(encoder_tape, latent_grad + critic_latent_grad)
        else:
            self.encoder.backward(encoder_tape, latent_grad)
            self.critic_encoder.backward(critic_tape, critic_latent_grad)


class PPOGroup:
    """Stacked networks and Adam of `members` (plain, feed-forward PPO agents).

    Args:
        members: The agents, all plain :class:`PPO` with networks of the same structure.
        fused: Run MLP networks as fused chains (the default); False always uses autograd.
    """

    def __init__(self, members: Sequence[PPO], fused: bool = True) -> None:
        if not members:
            raise ValueError("a PPOGroup needs at least one member")
        first = members[0]
        if any(type(member) is not PPO for member in members):
            raise NotStackableError("only plain PPO agents are grouped")
        if any(member.recurrent for member in members):
            raise NotStackableError("recurrent PPO agents are not batched")
        if not isinstance(first.observation_space, VECTOR_OBSERVATIONS):
            raise NotStackableError(f"observation space {type(first.observation_space).__name__} is not batched")
        if not isinstance(first.action_space, STACKED_ACTIONS):
            raise NotStackableError(f"{type(first.action_space).__name__} actions are not batched (the Gaussian "
                                    "log-std has no population version)")
        settings = {(m.share_encoders, m.normalize_images, str(m.device), repr(m.observation_space),
                     repr(m.action_space)) for m in members}
        if len(settings) != 1:
            raise NotStackableError("the members differ in share_encoders, normalize_images, device or spaces")
        self.members = list(members)
        self.share_encoders = first.share_encoders
        self.device = first.device
        # The stacked modules are shallow copies of the members' networks, so their methods apply.
        self.actor = cast(StochasticActor, stack_modules([m.actor for m in members]))
        self.critic = None if self.share_encoders else cast(ValueNetwork, stack_modules([m.critic for m in members]))
        learner: nn.Module
        member_nets: list[nn.Module]
        if self.critic is None:
            learner, member_nets = self.actor, [m.actor for m in members]
        else:
            learner = nn.ModuleDict({"actor": self.actor, "critic": self.critic})
            member_nets = [nn.ModuleDict({"actor": m.actor, "critic": m.critic}) for m in members]
        self.optimizer = StackedAdam(learner, member_nets, [m.optimizer for m in members])
        self.fused: _FusedNetworks | None = None
        if fused:
            try:
                self.fused = _FusedNetworks(self.actor, self.critic)
            except NotStackableError:
                self.fused = None

        def column(name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.tensor([getattr(m, name) for m in members], dtype=dtype, device=self.device).unsqueeze(1)

        self.clip_coef = column("clip_coef")
        self.ratio_low, self.ratio_high = 1.0 - self.clip_coef, 1.0 + self.clip_coef
        self.loss_weights = torch.cat([-torch.ones_like(self.clip_coef), 0.5 * column("vf_coef"), -column("ent_coef")],
                                      dim=1)
        self.stat_scale = torch.tensor([[-1.0, 0.5, 1.0]], device=self.device)  # policy, value loss, entropy
        self.max_grad_norm = column("max_grad_norm").squeeze(1)
        self.normalize_advantages = column("normalize_advantages", torch.bool)
        self.any_normalize = bool(self.normalize_advantages.any())
        self.clip_vloss = column("clip_vloss", torch.bool)
        self.any_clip_vloss = bool(self.clip_vloss.any())
        self.target_kl = [m.target_kl for m in members]

    def __len__(self) -> int:
        return len(self.members)

    # ------------------------------------------------------------------ networks
    def _inputs(self, obs: Any) -> torch.Tensor:
        """Observations ``[P * rows, ...]`` as network inputs ``[P, rows, features]``."""
        first = self.members[0]
        tensor = preprocess_tensor_observation(first.observation_space, obs, self.device, first.normalize_images)
        return tensor.reshape(len(self.members), -1, *tensor.shape[1:])

    def _latents(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        latent = self.actor.encode(inputs)[0]
        return latent, latent if self.critic is None else self.critic.encode(inputs)[0]

    def _value(self, critic_latent: torch.Tensor) -> torch.Tensor:
        head = cast(SharedActorCritic, self.actor).value_head if self.critic is None else self.critic.head
        return head(critic_latent).squeeze(-1)

    # ------------------------------------------------------------------ acting
    def act(self, obs: Any, action_mask: Any = None, *,
            deterministic: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Act for observations ``[P * rows, ...]`` (member-major): ``(action, log_prob, value)``.

        Member ``p``'s slice of each output is what ``PPO.get_action`` gives it for its rows
        (``action`` raw, as the buffer stores it; samples come from torch's global RNG).
        `action_mask` ``[P * rows, n]`` is applied as :meth:`PPO.prepare_action_mask` prepares it.
        """
        with torch.inference_mode():
            value, dist = self._policy(obs, action_mask, critic=True)
            raw = dist.mode() if deterministic else dist.sample()
            log_prob = dist.log_prob(raw)
            assert value is not None
        return (self._env_shaped(raw), log_prob.reshape(-1).cpu().numpy().astype(np.float32),
                value.reshape(-1).cpu().numpy().astype(np.float32))

    def greedy_actions(self, obs: Any, action_mask: Any = None) -> np.ndarray:
        """The mode actions ``[P * rows, ...]`` (raw) that ``PPO.test`` takes, without the value
        and log-probability that acting for a rollout needs."""
        with torch.inference_mode():
            return self._env_shaped(self._policy(obs, action_mask, critic=False)[1].mode())

    def _policy(self, obs: Any, action_mask: Any, critic: bool) -> tuple[torch.Tensor | None, Any]:
        """The values ``[P, rows]`` (when asked for) and the action distribution of observations
        ``[P * rows, ...]``."""
        inputs = self._inputs(obs)
        mask = self.members[0].prepare_action_mask(action_mask)
        members, rows = inputs.shape[0], inputs.shape[1]
        mask = None if mask is None else mask.reshape(members, rows, -1)
        if self.fused is not None:
            outputs, values = self.fused.forward(inputs, critic=critic)
            return None if values is None else values.squeeze(-1), self.actor.distribution_from_head(outputs, mask)
        if not critic:
            return None, self.actor.distribution_from_latent(self.actor.encode(inputs)[0], mask)
        latent, critic_latent = self._latents(inputs)
        return self._value(critic_latent), self.actor.distribution_from_latent(latent, mask)

    def _env_shaped(self, raw: torch.Tensor) -> np.ndarray:
        """Raw actions ``[P, rows, ...]`` as ``PPO.get_action`` returns them, flattened member-major."""
        space = self.members[0].action_space
        shape = () if isinstance(space, spaces.Discrete) else tuple(space.shape or ())
        dtype = np.float32 if isinstance(space, spaces.MultiBinary) else np.int64
        return raw.reshape(-1, *shape).cpu().numpy().astype(dtype)

    def values(self, obs: Any) -> np.ndarray:
        """``V(obs)`` float32 ``[P * rows]`` for observations ``[P * rows, ...]`` (member-major)."""
        with torch.inference_mode():
            inputs = self._inputs(obs)
            if self.fused is not None:
                values = self.fused.forward(inputs)[1]
                assert values is not None
                return values.reshape(-1).cpu().numpy().astype(np.float32)
            return self._value(self._latents(inputs)[1]).reshape(-1).cpu().numpy().astype(np.float32)

    # ------------------------------------------------------------------ learning
    def learn(self, buffers: Sequence[RolloutBuffer | None]) -> list[dict[str, float] | None]:
        """The PPO update of every member whose buffer is given (returns and advantages computed);
        return each one's ``PPO.learn`` statistics (None for the members that sit out)."""
        if len(buffers) != len(self.members):
            raise ValueError(f"expected {len(self.members)} buffers (None for idle members), got {len(buffers)}")
        members = len(self.members)
        rollouts = self._stack_rollouts(buffers)
        epochs = [0] * members
        schedules = [None if buffer is None else self._schedule(slot, buffer, epochs)
                     for slot, buffer in enumerate(buffers)]
        running = np.array([buffer is not None for buffer in buffers])
        stopped = np.zeros(members, dtype=bool)
        steps = np.zeros(members, dtype=np.int64)
        totals = torch.zeros(members, len(LOSS_NAMES), device=self.device)
        empty = np.zeros(0, dtype=np.int64)
        while True:
            batches = []
            for slot, schedule in enumerate(schedules):
                rows = next(schedule, None) if running[slot] and schedule is not None else None
                if rows is None:
                    running[slot] = False
                batches.append(empty if rows is None else rows)
            if not running.any():
                break
            loss, summary, heads = self._losses(rollouts, *pad_index_batches(batches))
            stepping = running.copy()
            if any(target is not None for target in self.target_kl):
                kls = summary[:, LOSS_NAMES.index("approx_kl")].tolist()
                for slot, target in enumerate(self.target_kl):
                    if running[slot] and target is not None and kls[slot] > target:
                        running[slot] = stepping[slot] = False
                        stopped[slot] = True
            if not stepping.any():
                continue
            mask = torch.as_tensor(stepping, device=self.device)
            self.optimizer.zero_grad()
            (loss * mask).sum().backward()
            if heads is not None:  # carry the head-output gradients back through the fused networks
                assert self.fused is not None
                tapes, outputs, values = heads
                self.fused.backward(tapes, _grad_or_zeros(outputs), _grad_or_zeros(values))
            self.optimizer.mask_padding()
            clip_flat_grad_norm(self.optimizer.flat, self.max_grad_norm)
            self.optimizer.step(mask)
            totals += summary * mask.unsqueeze(1)
            steps += stepping
        return self._results(buffers, totals, steps, epochs, stopped)

    def _schedule(self, slot: int, buffer: RolloutBuffer, epochs: list[int]) -> Iterator[np.ndarray]:
        """Member `slot`'s minibatch rows over all its epochs, drawn as ``PPO.learn`` draws them."""
        member = self.members[slot]
        for _ in range(member.update_epochs):
            epochs[slot] += 1
            yield from buffer.minibatch_indices(member.batch_size, member.rng)

    def _stack_rollouts(self, buffers: Sequence[RolloutBuffer | None]) -> _Rollouts:
        """Flatten each learning member's rollout to rows and stack them ``[P, rows, ...]``."""
        first = self.members[0]
        parts: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        for slot, buffer in enumerate(buffers):
            if buffer is None:
                continue
            n = buffer.size
            inputs = preprocess_tensor_observation(first.observation_space, buffer.observations[:n].flatten(0, 1),
                                                   self.device, first.normalize_images)
            actions = buffer.actions[:n].flatten(0, 1)
            if not isinstance(first.action_space, spaces.Discrete):
                actions = actions.reshape(actions.shape[0], -1)
            scalars = torch.stack([buffer.log_probs[:n], buffer.values[:n], buffer.advantages[:n],
                                   buffer.returns[:n]], dim=-1).flatten(0, 1)
            masks = None if buffer.action_masks is None else buffer.action_masks[:n].flatten(0, 1)
            parts.append((slot, inputs, actions, scalars, masks))
        if not parts:
            raise ValueError("no member has a rollout to learn from")
        members, rows = len(self.members), max(part[1].shape[0] for part in parts)
        _, inputs, actions, scalars, _ = parts[0]
        stacked = _Rollouts(
            inputs=inputs.new_zeros(members, rows, *inputs.shape[1:]),
            actions=actions.new_zeros(members, rows, *actions.shape[1:]),
            scalars=scalars.new_zeros(members, rows, 4),
            masks=None,
        )
        mask_width = next((part[4].shape[-1] for part in parts if part[4] is not None), None)
        if mask_width is not None:
            stacked.masks = torch.ones(members, rows, mask_width, dtype=torch.bool, device=self.device)
        for slot, inputs, actions, scalars, masks in parts:
            count = inputs.shape[0]
            stacked.inputs[slot, :count] = inputs
            stacked.actions[slot, :count] = actions
            stacked.scalars[slot, :count] = scalars
            if masks is not None and stacked.masks is not None:
                stacked.masks[slot, :count] = masks
        return stacked

    def _losses(self, rollouts: _Rollouts, rows: np.ndarray,
                weights: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, _FusedHeads | None]:
        """``PPO.compute_losses`` of every member's minibatch at once: the losses ``[P]`` to minimise,
        without gradients the statistics ``[P, 6]`` in ``LOSS_NAMES`` order, and for fused
        networks the tapes and head outputs (autograd leaves) their backward pass starts from.

        `rows` ``[P, width]`` indexes each member's rollout rows, `weights` ``[P, width]`` is 1/size on
        a member's real rows and 0 on padding (means become weighted sums)."""
        members, width = rows.shape
        flat = torch.as_tensor((rows + np.arange(members)[:, None] * rollouts.inputs.shape[1]).reshape(-1),
                               device=self.device)

        def take(stacked: torch.Tensor) -> torch.Tensor:  # [P, rows, ...] -> [P, width, ...]
            return stacked.flatten(0, 1).index_select(0, flat).unflatten(0, (members, width))

        inputs, actions = take(rollouts.inputs), take(rollouts.actions)
        old_log_probs, old_values, advantages, returns = take(rollouts.scalars).unbind(-1)
        masks = None if rollouts.masks is None else take(rollouts.masks)
        weight = torch.as_tensor(weights, device=self.device)
        if self.any_normalize:  # standardised over each member's own minibatch (population std)
            sizes = (weights > 0).sum(axis=1, keepdims=True)
            mean = (advantages * weight).sum(dim=1, keepdim=True)
            centered = advantages - mean
            std = (centered.square() * weight).sum(dim=1, keepdim=True).sqrt()
            normalize = self.normalize_advantages & torch.as_tensor(sizes > 1, device=self.device)
            advantages = torch.where(normalize, centered / (std + 1e-8), advantages)

        heads: _FusedHeads | None = None
        if self.fused is not None:
            tapes: list[Tape] = [[], [], [], []]
            outputs, values = self.fused.forward(inputs, tapes)
            assert values is not None
            outputs.requires_grad_()
            values.requires_grad_()
            heads = (tapes, outputs, values)
            dist, value = self.actor.distribution_from_head(outputs, masks), values.squeeze(-1)
        else:
            latent, critic_latent = self._latents(inputs)
            dist, value = self.actor.distribution_from_latent(latent, masks), self._value(critic_latent)
        log_prob, entropy = dist.log_prob(actions), dist.entropy()
        log_ratio = log_prob - old_log_probs
        ratio = log_ratio.exp()
        surrogate = torch.min(ratio * advantages, ratio.clamp(self.ratio_low, self.ratio_high) * advantages)
        value_error = (value - returns).square()
        if self.any_clip_vloss:
            value_clipped = old_values + torch.clamp(value - old_values, -self.clip_coef, self.clip_coef)
            value_error = torch.where(self.clip_vloss, torch.max(value_error, (value_clipped - returns).square()),
                                      value_error)
        # Per member: [mean surrogate, mean squared error, mean entropy]; the loss weighs them by
        # [-1, 0.5 * vf_coef, -ent_coef] (= policy_loss + vf_coef * value_loss - ent_coef * entropy).
        means = (torch.stack([surrogate, value_error, entropy], dim=-1) * weight.unsqueeze(-1)).sum(dim=1)
        loss = (means * self.loss_weights).sum(dim=1)
        with torch.no_grad():
            ratio_change = ratio - 1.0
            kl_and_clipped = torch.stack([ratio_change - log_ratio, (ratio_change.abs() > self.clip_coef).to(ratio)],
                                         dim=-1)
            summary = torch.cat([loss.unsqueeze(1), means * self.stat_scale,
                                 (kl_and_clipped * weight.unsqueeze(-1)).sum(dim=1)], dim=1)
        return loss, summary, heads

    def _results(self, buffers: Sequence[RolloutBuffer | None], totals: torch.Tensor, steps: np.ndarray,
                 epochs: list[int], stopped: np.ndarray) -> list[dict[str, float] | None]:
        """Each learning member's ``PPO.learn`` dictionary (its learn counter advanced)."""
        sums = totals.cpu().tolist()
        results: list[dict[str, float] | None] = []
        for slot, (member, buffer) in enumerate(zip(self.members, buffers, strict=True)):
            if buffer is None:
                results.append(None)
                continue
            member.learn_counter += 1
            count = int(steps[slot])
            result = {name: (sums[slot][i] / count if count else float("nan")) for i, name in enumerate(LOSS_NAMES)}
            result.update(explained_variance=member._explained_variance(buffer), epochs=float(epochs[slot]),
                          minibatches=float(count), early_stop=float(stopped[slot]))
            results.append(result)
        return results

    def copy_to_members(self) -> None:
        """Write weights and Adam state back into the member agents."""
        copy_to_members(self.actor, [m.actor for m in self.members])
        if self.critic is not None:
            copy_to_members(self.critic, [m.critic for m in self.members])
        self.optimizer.copy_to_members()
