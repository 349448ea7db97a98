"""PPO's learning step for a group of members: minibatch schedules, the stored minibatches
replayed through the current networks, the clipped losses and the update loop."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from agile_core.algorithms.group import MemberGroup
from agile_core.algorithms.ppo_losses import LOSS_NAMES, ppo_minibatch_losses, step_minibatch
from agile_onpolicy.ppo_acting import group_heads, latent_heads, policy_of
from agile_onpolicy.ppo_hidden import HiddenStates, lstm_encoders, member_axis, recurrent_networks
from agile_onpolicy.ppo_minibatch import Batch, MemberRows, PPOMinibatch, sequence_minibatch
from agile_onpolicy.rollout import RecurrentBatch, RolloutBuffer

if TYPE_CHECKING:
    from agile_onpolicy.ppo import PPO

__all__ = ["epoch_minibatches", "evaluate_minibatch", "explained_variance", "learn_members", "minibatch_losses"]


def learn_members(group: MemberGroup, batch: Sequence[RolloutBuffer | None],
                  active: Sequence[bool] | None = None) -> list[dict[str, float] | None]:
    """The PPO update of every active member of `group` on its own rollout (see
    :meth:`PPO.learn_population`); each member's statistics, None for the idle ones."""
    rollouts = list(batch)
    size = len(group)
    if len(rollouts) != size:
        raise ValueError(f"expected {size} rollouts (None for idle members), got {len(rollouts)}")
    learning = [rollout is not None and (active is None or bool(active[slot])) for slot, rollout in enumerate(rollouts)]
    if not any(learning):
        return [None] * size
    members = cast("list[PPO]", group.members)
    for member, on in zip(members, learning, strict=True):
        for network in member.networks if on else ():
            network.train()
    epochs = [0] * size
    schedules = [_schedule(member, rollout, epochs, slot) if on and rollout is not None else None
                 for slot, (member, rollout, on) in enumerate(zip(members, rollouts, learning, strict=True))]
    rows = None if members[0].recurrent else MemberRows(group, [r if on else None for r, on in
                                                               zip(rollouts, learning, strict=True)])
    running, stopped = list(learning), [False] * size
    steps = np.zeros(size, dtype=np.int64)
    totals = torch.zeros(size, len(LOSS_NAMES), device=group.device)
    targets = [member.target_kl for member in members]
    while True:
        picks = [next(schedule, None) if running[slot] and schedule is not None else None
                 for slot, schedule in enumerate(schedules)]
        running = [pick is not None for pick in picks]
        if not any(running):
            break
        if rows is None:
            minibatch = sequence_minibatch(members, cast(list[RecurrentBatch | None], picks))
        else:
            minibatch = rows.minibatch([np.zeros(0, np.int64) if pick is None else pick for pick in picks])
        losses, stats = minibatch_losses(group, minibatch)
        step_minibatch(group, "optimizer", losses, stats, running, stopped, targets, totals, steps)
    sums = totals.cpu().tolist()
    results: list[dict[str, float] | None] = []
    for slot, (member, rollout) in enumerate(zip(members, rollouts, strict=True)):
        if not learning[slot] or rollout is None:
            results.append(None)
            continue
        member.learn_counter += 1
        count = int(steps[slot])
        result = {name: (sums[slot][i] / count if count else float("nan")) for i, name in enumerate(LOSS_NAMES)}
        result.update(explained_variance=explained_variance(rollout), epochs=float(epochs[slot]),
                      minibatches=float(count), early_stop=float(stopped[slot]))
        results.append(result)
    return results


def _schedule(agent: PPO, buffer: RolloutBuffer, epochs: list[int], slot: int) -> Iterator[Any]:
    """The agent's minibatches over all its epochs, drawn from its ``rng`` as :meth:`PPO.learn`
    draws them: flat row indices, or BPTT sequences when recurrent; ``epochs[slot]`` counts
    the epochs started."""
    for _ in range(agent.update_epochs):
        epochs[slot] += 1
        if agent.recurrent:
            yield from epoch_minibatches(agent, buffer)
        else:
            yield from buffer.minibatch_indices(agent.batch_size, agent.rng)


def epoch_minibatches(agent: PPO, buffer: RolloutBuffer) -> Iterator[Batch]:
    """One epoch of the agent's minibatches: flat rows, or BPTT sequences when recurrent."""
    if not agent.recurrent:
        yield from buffer.minibatches(agent.batch_size, agent.rng)
        return
    seq_len = buffer.size if agent.max_seq_len is None else min(agent.max_seq_len, buffer.size)
    if agent.bptt_sequence_type == "maximum":
        seq_len = buffer.size
    sequences = max(1, agent.batch_size // seq_len)
    yield from buffer.recurrent_minibatches(seq_len, sequences, agent.rng, agent.bptt_sequence_type)


def _unroll(group: MemberGroup, minibatch: PPOMinibatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Replay a recurrent minibatch's time-major sequences ``[P, L, B, ...]`` through the
    members' LSTM encoders, each from its stored initial state and zeroed before every
    episode start; return actor and critic latents ``[P, L, B, D]``."""
    assert minibatch.starts is not None and minibatch.initial_hidden is not None
    members, length, width = minibatch.starts.shape
    obs = group.members[0].population_inputs(minibatch.obs.reshape(members, length * width, -1))
    x = obs.reshape(members, length, width, -1).movedim(1, 2)  # [P, B, L, ...]
    starts = minibatch.starts.movedim(1, 2)
    latents: dict[str, torch.Tensor] = {}
    if group.stacked:
        for name, net in recurrent_networks(group).items():
            latents[name] = net.encoder(x, minibatch.initial_hidden[name], starts)[0]
    else:
        member = cast("PPO", group.members[0])
        initial = member.fit_hidden(cast(HiddenStates, member_axis(minibatch.initial_hidden, add=False)))
        for name, lstm in lstm_encoders(member).items():
            latents[name] = lstm(x[0], initial[name], starts[0])[0].unsqueeze(0)
    actor = latents["actor"].movedim(2, 1)
    return actor, latents["critic"].movedim(2, 1) if "critic" in latents else actor


def evaluate_minibatch(group: MemberGroup, minibatch: PPOMinibatch) -> tuple[Any, torch.Tensor]:
    """The current action distribution and values ``[P, rows]`` of a minibatch (under its stored
    action masks); recurrent sequences are replayed from their stored initial state."""
    if minibatch.starts is None:
        inputs = group.members[0].population_inputs(minibatch.obs)
        heads, value, _ = group_heads(group, inputs)
    else:
        latent, critic_latent = _unroll(group, minibatch)
        heads, value = latent_heads(group, latent.flatten(1, 2), critic_latent.flatten(1, 2))
    assert value is not None
    return policy_of(group).distribution_from_head(heads, minibatch.action_masks), value


def minibatch_losses(group: MemberGroup, minibatch: PPOMinibatch,
                     graded_stats: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO loss of every member's minibatch: the losses ``[P]`` to minimise and the
    statistics ``[P, 6]`` in ``LOSS_NAMES`` order (see :func:`ppo_minibatch_losses`)."""
    dist, value = evaluate_minibatch(group, minibatch)
    return ppo_minibatch_losses(group, dist, value, minibatch, graded_stats)


def explained_variance(buffer: RolloutBuffer) -> float:
    """``1 - Var(R - V) / Var(R)`` over the valid rows of the rollout (nan when Var(R) = 0)."""
    n = buffer.size
    valid = buffer.valid[:n]
    returns, values = buffer.returns[:n][valid], buffer.values[:n][valid]
    if returns.numel() < 2:
        return float("nan")
    var = returns.var(correction=0)
    return float("nan") if float(var) == 0.0 else float(1.0 - (returns - values).var(correction=0) / var)
