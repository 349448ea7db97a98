"""A per-agent reference PPO update, written plainly with one agent's own networks and its
``torch.optim.Adam``: the oracle :meth:`PPO.learn_population` (and so ``PPO.learn``) is tested
against. It lives only here; the package defines the PPO loss once."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from agile_onpolicy.ppo import LOSS_NAMES, PPO
from agile_onpolicy.rollout import RecurrentBatch, RolloutBuffer


def _masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return x.mean()
    weights = mask.to(x.dtype)
    return (x * weights).sum() / weights.sum().clamp(min=1.0)


def unroll(agent: PPO, obs: torch.Tensor, initial: Any, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Actor and critic latents ``[L, B, D]`` of time-major sequences, one step at a time through
    the agent's own LSTM encoders, the state zeroed before every flagged episode start."""
    initial = agent.fit_hidden(initial)
    latents = {}
    for name, lstm in agent._lstms().items():
        h, c = initial[name]
        steps = []
        for t in range(obs.shape[0]):
            keep = (~starts[t]).to(h.dtype)[None, :, None]
            out, (h, c) = lstm(obs[t], (h * keep, c * keep))
            steps.append(out)
        latents[name] = torch.stack(steps)
    return latents["actor"], latents.get("critic", latents["actor"])


def evaluate(agent: PPO, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``log pi(a|s)``, entropy and ``V(s)`` of a minibatch under the agent's own networks, and its loss mask."""
    obs = agent.preprocess(batch.obs)
    if isinstance(batch, RecurrentBatch):
        latent, critic_latent = unroll(agent, obs, batch.initial_hidden, batch.episode_starts)
        mask: torch.Tensor | None = batch.loss_mask
    else:
        latent = agent.actor.encode(obs)[0]
        critic_latent = latent if agent.share_encoders else agent.critic.encode(obs)[0]
        mask = None
    dist = agent.actor.distribution_from_latent(latent, batch.action_masks)
    value_head = agent.actor.value_head if agent.share_encoders else agent.critic.head
    actions = agent._flat_action(batch.actions, latent.shape[:-1])
    return dist.log_prob(actions), dist.entropy(), value_head(critic_latent).squeeze(-1), mask


def losses(agent: PPO, batch: Any) -> dict[str, torch.Tensor]:
    """Clipped surrogate, (clipped) value loss and entropy bonus of one minibatch."""
    log_prob, entropy, value, mask = evaluate(agent, batch)
    advantages = batch.advantages
    if agent.normalize_advantages:
        selected = advantages[mask] if mask is not None else advantages
        if selected.numel() > 1:
            advantages = (advantages - selected.mean()) / (selected.std(correction=0) + 1e-8)
    log_ratio = log_prob - batch.old_log_probs
    ratio = log_ratio.exp()
    with torch.no_grad():
        approx_kl = _masked_mean((ratio - 1.0) - log_ratio, mask)
        clip_fraction = _masked_mean(((ratio - 1.0).abs() > agent.clip_coef).float(), mask)
    clipped = ratio.clamp(1.0 - agent.clip_coef, 1.0 + agent.clip_coef) * advantages
    policy_loss = -_masked_mean(torch.min(ratio * advantages, clipped), mask)
    value_error = (value - batch.returns).pow(2)
    if agent.clip_vloss:
        value_clipped = batch.old_values + (value - batch.old_values).clamp(-agent.clip_coef, agent.clip_coef)
        value_error = torch.max(value_error, (value_clipped - batch.returns).pow(2))
    value_loss = 0.5 * _masked_mean(value_error, mask)
    entropy_mean = _masked_mean(entropy, mask)
    loss = policy_loss + agent.vf_coef * value_loss - agent.ent_coef * entropy_mean
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy_mean,
            "approx_kl": approx_kl, "clip_fraction": clip_fraction}


def ppo_learn(agent: PPO, buffer: RolloutBuffer) -> dict[str, float]:
    """One PPO update: ``update_epochs`` passes of minibatches drawn from the agent's ``rng``, a
    clipped gradient step each, stopping (without that step) when a minibatch's KL exceeds ``target_kl``."""
    totals = dict.fromkeys(LOSS_NAMES, 0.0)
    steps, epochs, stopped = 0, 0, False
    params = [p for group in agent.optimizer.param_groups for p in group["params"]]
    for network in agent.networks:
        network.train()
    for _ in range(agent.update_epochs):
        epochs += 1
        for batch in agent._minibatches(buffer):
            stats = losses(agent, batch)
            if agent.target_kl is not None and float(stats["approx_kl"]) > agent.target_kl:
                stopped = True
                break
            agent.optimizer.zero_grad()
            stats["loss"].backward()
            nn.utils.clip_grad_norm_(params, agent.max_grad_norm)
            agent.optimizer.step()
            for name in LOSS_NAMES:
                totals[name] += float(stats[name].detach())
            steps += 1
        if stopped:
            break
    agent.learn_counter += 1
    result = {name: (value / steps if steps else float("nan")) for name, value in totals.items()}
    result.update(explained_variance=agent._explained_variance(buffer), epochs=float(epochs),
                  minibatches=float(steps), early_stop=float(stopped))
    return result
