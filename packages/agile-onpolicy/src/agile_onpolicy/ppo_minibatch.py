"""PPO's minibatches laid out ``[P, rows, ...]`` for a group of members: from flat rollout rows,
from BPTT sequences, or one agent's own minibatch (``P = 1``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup
from agile_core.networks import EvolvableLSTM
from agile_core.training.population import pad_index_batches
from agile_core.training.tensor_tree import map_tree
from agile_onpolicy.ppo_hidden import HiddenStates, lstm_encoders
from agile_onpolicy.rollout import RecurrentBatch, RolloutBatch, RolloutBuffer

if TYPE_CHECKING:
    from agile_onpolicy.ppo import PPO

__all__ = ["Batch", "MemberRows", "PPOMinibatch", "flat_action", "minibatch_of", "sequence_minibatch"]

Batch = RolloutBatch | RecurrentBatch


@dataclass
class PPOMinibatch:
    """Minibatches of a group's members laid out ``[P, rows, ...]`` (see :meth:`PPO.learn_population`).

    ``mask[p]`` is 1 on member ``p``'s own rows and 0 on padding (recurrent: its loss mask) and
    ``counts[p]`` their number (at least 1), so a masked row sum over the count is the member's
    mean. Recurrent minibatches hold BPTT sequences: ``obs`` is time-major ``[P, L, B, ...]``, the
    rows of the other fields are its ``L x B`` steps, ``starts`` ``[P, L, B]`` flags the steps
    where an episode begins and ``initial_hidden`` is each sequence's stored initial state
    ``[P, layers, B, H]`` (sequences and steps zero-padded to the longest member's)."""

    obs: Any
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    mask: torch.Tensor
    counts: torch.Tensor
    action_masks: torch.Tensor | None = None
    starts: torch.Tensor | None = None
    initial_hidden: HiddenStates | None = None


def flat_action(action_space: spaces.Space, action: torch.Tensor, lead: torch.Size) -> torch.Tensor:
    """Actions as the distributions take them: ``[*lead]`` (Discrete) or ``[*lead, size]``."""
    if isinstance(action_space, spaces.Discrete):
        return action.reshape(lead)
    return action.reshape(*lead, -1)


def _padded(leaf: torch.Tensor, shape: Sequence[int], fill: float | bool = 0) -> torch.Tensor:
    """`leaf` in the leading corner of a tensor of `shape` filled with `fill` (`leaf` itself when it fits)."""
    if tuple(leaf.shape) == tuple(shape):
        return leaf
    out = leaf.new_full(tuple(shape), fill)
    out[tuple(slice(0, size) for size in leaf.shape)] = leaf
    return out


def sequence_minibatch(members: Sequence[PPO], batches: Sequence[RecurrentBatch | None]) -> PPOMinibatch:
    """The members' BPTT minibatches (None for a member that sits out) as one
    :class:`PPOMinibatch`: sequences and steps padded to the longest member's ``L x B`` (padding
    weighs nothing: it is outside every loss mask and starts from a zero state)."""
    present = [batch for batch in batches if batch is not None]
    length = max(batch.old_log_probs.shape[0] for batch in present)
    width = max(batch.old_log_probs.shape[1] for batch in present)
    like = present[0]  # recurrent policies read vector observations: every field is one tensor

    def stacked(get: Any, fill: float | bool = 0) -> torch.Tensor:
        parts = [None if batch is None else get(member, batch) for member, batch in zip(members, batches, strict=True)]
        model = next(part for part in parts if part is not None)
        shape = (length, width, *model.shape[2:])
        return torch.stack([model.new_full(shape, fill) if part is None else _padded(part, shape, fill)
                            for part in parts])

    def hidden_leaf(lstms: list[EvolvableLSTM], *parts: torch.Tensor | None) -> torch.Tensor:
        present = next(part for part in parts if part is not None)
        shape = (max(lstm.num_layers for lstm in lstms), width, max(lstm.hidden_state_size for lstm in lstms))
        return torch.stack([_padded(part, shape) if part is not None else present.new_zeros(shape) for part in parts])

    hidden = [None if batch is None else member.fit_hidden(cast(HiddenStates, batch.initial_hidden))
              for member, batch in zip(members, batches, strict=True)]
    template = next(state for state in hidden if state is not None)
    initial = {name: tuple(hidden_leaf([lstm_encoders(member)[name] for member in members],  # the deepest, widest
                                       *[None if state is None else state[name][k] for state in hidden])
                           for k in range(2)) for name in template}
    rows = length * width
    mask = stacked(lambda _, batch: batch.loss_mask, False).to(torch.float32).reshape(len(members), rows)
    actions = stacked(lambda member, batch: flat_action(member.action_space, batch.actions, batch.old_log_probs.shape))
    masks = None if like.action_masks is None else stacked(lambda _, batch: batch.action_masks, True)
    scalars = [stacked(lambda _, batch, name=name: getattr(batch, name)).reshape(len(members), rows)
               for name in ("old_log_probs", "old_values", "advantages", "returns")]
    return PPOMinibatch(
        obs=stacked(lambda _, batch: batch.obs), actions=actions.reshape(len(members), rows, *actions.shape[3:]),
        old_log_probs=scalars[0], old_values=scalars[1], advantages=scalars[2], returns=scalars[3], mask=mask,
        counts=mask.sum(dim=1, keepdim=True).clamp(min=1.0),
        action_masks=None if masks is None else masks.reshape(len(members), rows, -1),
        starts=stacked(lambda _, batch: batch.episode_starts, False),
        initial_hidden=initial)  # type: ignore[arg-type]


def minibatch_of(agent: PPO, batch: Batch) -> PPOMinibatch:
    """One of `agent`'s minibatches as the ``P = 1`` :class:`PPOMinibatch`: a flat batch's ``B``
    rows all count; of a recurrent batch's ``L x B`` steps those in its ``loss_mask``."""
    if isinstance(batch, RecurrentBatch):
        return sequence_minibatch([agent], [batch])
    mask = torch.ones(1, batch.old_log_probs.shape[0], device=batch.old_log_probs.device)
    lead = batch.old_log_probs.shape
    masks = batch.action_masks
    return PPOMinibatch(
        obs=map_tree(lambda leaf: leaf.unsqueeze(0), batch.obs),
        actions=flat_action(agent.action_space, cast(torch.Tensor, batch.actions), lead).unsqueeze(0),
        old_log_probs=batch.old_log_probs.reshape(1, -1), old_values=batch.old_values.reshape(1, -1),
        advantages=batch.advantages.reshape(1, -1), returns=batch.returns.reshape(1, -1),
        mask=mask, counts=mask.sum(dim=1, keepdim=True).clamp(min=1.0),
        action_masks=None if masks is None else masks.reshape(1, lead.numel(), -1))


class MemberRows:
    """The learning members' rollouts flattened to rows and stacked ``[P, rows, ...]`` (zero-padded
    to the longest; an idle member's rows stay empty), from which minibatches are gathered."""

    def __init__(self, group: MemberGroup, buffers: Sequence[RolloutBuffer | None]) -> None:
        action_space = cast("PPO", group.members[0]).action_space
        self.device = group.device
        self.size = len(buffers)
        counts = [0 if buffer is None else buffer.size * buffer.num_envs for buffer in buffers]
        self.rows = max(counts)

        present = [buffer is not None for buffer in buffers]

        def stacked(field: Any) -> Any:
            parts = [None if buffer is None else field(buffer) for buffer in buffers]
            like = next(part for part in parts if part is not None)
            filled = [like if part is None else part for part in parts]
            return map_tree(lambda *leaves: self._stack(list(leaves), present), filled[0], *filled[1:])

        self.obs = stacked(lambda b: map_tree(lambda leaf: leaf[: b.size].flatten(0, 1), b.observations))
        self.actions = stacked(lambda b: flat_action(action_space, b.actions[: b.size].flatten(0, 1),
                                                     torch.Size([b.size * b.num_envs])))
        self.scalars = stacked(lambda b: torch.stack([b.log_probs[: b.size], b.values[: b.size], b.advantages[: b.size],
                                                      b.returns[: b.size]], dim=-1).flatten(0, 1))
        masked = [buffer is not None and buffer.action_masks is not None for buffer in buffers]
        self.masks = None
        if any(masked):
            width = next(b.action_masks.shape[-1] for b, on in zip(buffers, masked, strict=True) if on and b is not None
                         and b.action_masks is not None)
            self.masks = torch.ones(self.size, self.rows, width, dtype=torch.bool, device=self.device)
            for slot, buffer in enumerate(buffers):
                if buffer is not None and buffer.action_masks is not None:
                    self.masks[slot, : counts[slot]] = buffer.action_masks[: buffer.size].flatten(0, 1)

    def _stack(self, leaves: list[torch.Tensor], present: list[bool]) -> torch.Tensor:
        """One leaf of every member ``[rows_p, ...]`` as ``[P, rows, ...]`` (a view when ``P = 1``)."""
        if self.size == 1:
            return leaves[0].unsqueeze(0)
        out = leaves[0].new_zeros(self.size, self.rows, *leaves[0].shape[1:])
        for slot, (leaf, here) in enumerate(zip(leaves, present, strict=True)):
            if here:
                out[slot, : leaf.shape[0]] = leaf
        return out

    def minibatch(self, picks: Sequence[np.ndarray]) -> PPOMinibatch:
        """The members' minibatches of rollout rows `picks` (empty for a member that sits out)."""
        padded, weights = pad_index_batches(picks)
        members, width = padded.shape
        mask = torch.as_tensor(weights > 0, device=self.device).to(torch.float32)
        flat = torch.as_tensor((padded + np.arange(members)[:, None] * self.rows).reshape(-1), device=self.device)

        def take(stacked: torch.Tensor) -> torch.Tensor:
            return stacked.flatten(0, 1).index_select(0, flat).unflatten(0, (members, width))

        old_log_probs, old_values, advantages, returns = take(self.scalars).unbind(-1)
        return PPOMinibatch(obs=map_tree(take, self.obs), actions=take(self.actions), old_log_probs=old_log_probs,
                            old_values=old_values, advantages=advantages, returns=returns,
                            mask=mask, counts=mask.sum(dim=1, keepdim=True).clamp(min=1.0),
                            action_masks=None if self.masks is None else take(self.masks))
