"""The PPO loss of one minibatch per member, and the action conventions of stochastic policies,
shared by every PPO-style algorithm (agile-onpolicy's PPO, agile-marl's IPPO).

:func:`ppo_minibatch_losses` is written over a leading member axis (``[P, rows]``, see
:mod:`agile_core.algorithms.group`): every hyperparameter is a per-member column and every mean is
a masked row sum over the member's own row count, so padding and idle members weigh nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from gymnasium import spaces

from agile_core.networks.distributions import ActionDistribution

if TYPE_CHECKING:
    from agile_core.algorithms.group import MemberGroup

__all__ = ["LOSS_NAMES", "PPOMinibatchLike", "ppo_minibatch_losses", "prepare_action_mask", "step_minibatch",
           "to_env_action"]

LOSS_NAMES: tuple[str, ...] = (
    "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
)
"""The statistics :func:`ppo_minibatch_losses` gives, in order."""


class PPOMinibatchLike(Protocol):
    """What the loss reads of a minibatch laid out ``[P, rows, ...]``: the stored (raw) actions,
    old log-probabilities and values, advantages and returns ``[P, rows]``, ``mask`` (1 on a member's
    own rows, 0 on padding) and ``counts`` ``[P, 1]`` (its rows, at least 1)."""

    actions: torch.Tensor
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    mask: torch.Tensor
    counts: torch.Tensor


def ppo_minibatch_losses(group: MemberGroup, dist: ActionDistribution, value: torch.Tensor,
                         minibatch: PPOMinibatchLike, graded_stats: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO loss of every member's minibatch under the current policy `dist` and values
    ``[P, rows]``: the losses ``[P]`` to minimise and the statistics ``[P, 6]`` in ``LOSS_NAMES``
    order (``approx_kl`` is the ``E[(r - 1) - log r]`` estimate of ``KL(pi_old || pi)``). The
    statistics carry no gradient unless `graded_stats` (then the loss terms do; ``approx_kl``
    and ``clip_fraction`` are to be read without).

    Reads the members' ``normalize_advantages`` (standardise over the member's own minibatch,
    population std, when it has 2+ rows), ``clip_coef``, ``clip_vloss``, ``vf_coef`` and
    ``ent_coef`` as columns of `group`."""
    mask, counts = minibatch.mask, minibatch.counts
    advantages = minibatch.advantages
    normalize = group.column("normalize_advantages", torch.bool)
    if any(member.normalize_advantages for member in group.members):
        # standardised over each member's own minibatch (population std), when it has 2+ rows
        mean = (advantages * mask).sum(dim=1, keepdim=True) / counts
        centered = advantages - mean
        std = ((centered.square() * mask).sum(dim=1, keepdim=True) / counts).sqrt()
        normalize = normalize & (counts > 1)
        advantages = torch.where(normalize, centered / (std + 1e-8), advantages)

    log_ratio = dist.log_prob(minibatch.actions) - minibatch.old_log_probs
    ratio = log_ratio.exp()
    clip_coef = group.column("clip_coef")
    # Clipped surrogate: the pessimistic (smaller) of the unclipped and clipped objectives.
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef) * advantages)
    # Value regression towards the returns, optionally clipped around the old values.
    value_error = (value - minibatch.returns).square()
    if any(member.clip_vloss for member in group.members):
        old = minibatch.old_values
        clipped = old + (value - old).clamp(-clip_coef, clip_coef)
        value_error = torch.where(group.column("clip_vloss", torch.bool),
                                  torch.max(value_error, (clipped - minibatch.returns).square()), value_error)
    entropy = dist.entropy()
    # Each row's share of policy_loss + vf_coef * value_loss - ent_coef * entropy (policy_loss the
    # mean negated surrogate, value_loss half the mean squared error), averaged over the member's
    # own rows: one small graph for autograd.
    weights = mask / counts
    per_row = torch.addcmul(torch.addcmul(surrogate.neg(), value_error, 0.5 * group.column("vf_coef")),
                            entropy, group.column("ent_coef"), value=-1.0)
    loss = torch.linalg.vecdot(per_row, weights)
    with nullcontext() if graded_stats else torch.no_grad():
        change = ratio - 1.0
        parts = torch.stack([surrogate, value_error, entropy, change - log_ratio,
                             (change.abs() > clip_coef).to(ratio)], dim=-1)
        means = torch.linalg.vecdot(parts.transpose(1, 2), mask.unsqueeze(1)) / counts  # [P, 5]
        stats = torch.cat([loss.unsqueeze(1), means * _STAT_SIGNS.to(means.device)], dim=1)
    return loss, stats if graded_stats else stats.detach()


_STAT_SIGNS = torch.tensor([-1.0, 0.5, 1.0, 1.0, 1.0])
"""From the weighted means of (surrogate, squared error, entropy, KL terms, clipped) to the
statistics (policy_loss, value_loss, entropy, approx_kl, clip_fraction)."""


def step_minibatch(group: MemberGroup, optimizer: str, losses: torch.Tensor, stats: torch.Tensor,
                   running: list[bool], stopped: list[bool], targets: Sequence[float | None],
                   totals: torch.Tensor, steps: np.ndarray) -> None:
    """One minibatch update of a PPO-style epoch loop (PPO, IPPO) for a group: a running member
    whose approximate KL exceeds its ``target_kl`` stops for the rest of the update (its
    `running` false, `stopped` true) and takes no step; the others step `optimizer` with their own
    ``max_grad_norm``, and their stats add to `totals` and one step to `steps` (in place)."""
    stepping = list(running)
    if any(target is not None for target in targets):
        kls = stats[:, LOSS_NAMES.index("approx_kl")].tolist()
        for slot, target in enumerate(targets):
            if running[slot] and target is not None and kls[slot] > target:
                running[slot] = stepping[slot] = False
                stopped[slot] = True
    if not any(stepping):
        return
    mask = group.flags(stepping)
    group.step(optimizer, losses * mask.squeeze(1), stepping, group.column("max_grad_norm").squeeze(1))
    totals += stats.detach() * mask
    steps += np.asarray(stepping)


def prepare_action_mask(space: spaces.Space, action_mask: Any, device: torch.device | str) -> torch.Tensor | None:
    """`action_mask` (``[..., n]`` or ``[..., sum(nvec)]``, truthy = allowed) as the bool tensor a
    stochastic policy applies, or None (no mask given, or a Box/MultiBinary space, which takes none).

    A row (for MultiDiscrete, a component) that allows no action at all allows every action:
    that is what a vector env reports for a sub-env whose step info carried no mask."""
    if action_mask is None or not isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
        return None
    if isinstance(action_mask, torch.Tensor):
        mask = action_mask.to(device=device, dtype=torch.bool)
    else:
        mask = torch.as_tensor(np.asarray(action_mask), device=device).bool()
    sizes = [int(space.n)] if isinstance(space, spaces.Discrete) else [int(n) for n in space.nvec]
    if mask.shape[-1] != sum(sizes):
        raise ValueError(f"action_mask has {mask.shape[-1]} entries per row, the action space needs {sum(sizes)}")
    parts = [part | ~part.any(dim=-1, keepdim=True) for part in torch.split(mask, sizes, dim=-1)]
    return torch.cat(parts, dim=-1)


def to_env_action(space: spaces.Space, action: Any) -> np.ndarray:
    """What the environment receives for a stochastic policy's raw actions: ``start`` added for
    Discrete and MultiDiscrete, Box samples clipped to the bounds (in the space's dtype),
    MultiBinary as int8."""
    array = np.asarray(action)
    if isinstance(space, spaces.Discrete):
        return array.astype(np.int64) + int(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        return array.astype(np.int64) + np.asarray(space.start, dtype=np.int64)
    if isinstance(space, spaces.MultiBinary):
        return array.astype(np.int8)
    assert isinstance(space, spaces.Box)
    return np.clip(array, space.low, space.high).astype(space.dtype)
