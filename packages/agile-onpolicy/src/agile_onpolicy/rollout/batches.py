"""Minibatch containers yielded by :class:`~agile_onpolicy.rollout.buffer.RolloutBuffer`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agile_core.training.tensor_tree import TensorTree, map_tree

__all__ = ["RecurrentBatch", "RolloutBatch"]


@dataclass(frozen=True)
class RolloutBatch:
    """A minibatch of ``B`` valid rollout rows (flattened over steps and environments).

    ``obs`` and ``actions`` are tensor trees whose leaves have leading dimension ``B``;
    the other fields are ``[B]``. ``indices`` holds the flat row index
    ``step * num_envs + env`` of every row. ``action_masks`` (``[B, n]`` bool, True =
    allowed) is the action mask the policy acted under, None when the rollout stored none.
    """

    obs: TensorTree
    actions: TensorTree
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    indices: torch.Tensor
    action_masks: torch.Tensor | None = None


@dataclass(frozen=True)
class RecurrentBatch:
    """A minibatch of ``B`` sequences of ``L`` steps, time-major (``[L, B, ...]``).

    Fields:

    * ``obs``, ``actions``: tensor trees with leaves ``[L, B, ...]`` (zero on padding);
    * ``old_log_probs``, ``old_values``, ``advantages``, ``returns``: ``[L, B]``;
    * ``initial_hidden``: the stored recurrent state at each sequence's first step, in
      the policy's convention (batch axis of size ``B`` at ``hidden_batch_dim``);
    * ``episode_starts``: ``[L, B]`` bool, True where an episode begins: the policy
      must zero its state *before* processing that step;
    * ``step_mask``: ``[L, B]`` bool, False on padding;
    * ``valid_mask``: ``step_mask`` and not an autoreset row;
    * ``loss_mask``: ``valid_mask`` restricted to steps owned by this sequence (differs
      from ``valid_mask`` only on the burn-in half of overlapping sequences); use it to
      weight the loss so each valid row counts exactly once per epoch;
    * ``time_indices``: ``[L, B]`` rollout step of each entry (-1 on padding);
    * ``env_indices``: ``[B]`` environment of each sequence;
    * ``action_masks``: ``[L, B, n]`` bool action masks the policy acted under (all
      False on padding), None when the rollout stored none.
    """

    obs: TensorTree
    actions: TensorTree
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    initial_hidden: TensorTree
    episode_starts: torch.Tensor
    step_mask: torch.Tensor
    valid_mask: torch.Tensor
    loss_mask: torch.Tensor
    time_indices: torch.Tensor
    env_indices: torch.Tensor
    action_masks: torch.Tensor | None = None

    def select_sequences(self, chosen: torch.Tensor, hidden_batch_dim: int) -> RecurrentBatch:
        """The batch of the sequences at positions `chosen` (``[B']`` indices, in that order);
        `hidden_batch_dim` is the batch axis of ``initial_hidden``'s leaves."""

        def steps(leaf: torch.Tensor) -> torch.Tensor:
            return leaf.index_select(1, chosen)

        def hidden(leaf: torch.Tensor) -> torch.Tensor:
            return leaf.index_select(hidden_batch_dim % leaf.dim(), chosen)

        return RecurrentBatch(
            obs=map_tree(steps, self.obs), actions=map_tree(steps, self.actions),
            old_log_probs=steps(self.old_log_probs), old_values=steps(self.old_values),
            advantages=steps(self.advantages), returns=steps(self.returns),
            initial_hidden=map_tree(hidden, self.initial_hidden), episode_starts=steps(self.episode_starts),
            step_mask=steps(self.step_mask), valid_mask=steps(self.valid_mask), loss_mask=steps(self.loss_mask),
            time_indices=steps(self.time_indices), env_indices=self.env_indices.index_select(0, chosen),
            action_masks=None if self.action_masks is None else steps(self.action_masks))
