"""Per-agent reference learning steps, written plainly with one agent's own networks and
``torch.optim.Adam``: the oracles the population-shaped steps (``learn_population``) are tested
against. They live only here; the packages define each algorithm once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from agile_core.networks import NoisyLinear, preprocess_observation
from agile_offpolicy.ddpg import DDPG
from agile_offpolicy.dqn import DQN
from agile_offpolicy.rainbow import RainbowDQN, project_distribution
from agile_offpolicy.td3 import TD3


def _soft_update(online: torch.nn.Module, target: torch.nn.Module, tau: float) -> None:
    with torch.no_grad():
        for param, target_param in zip(online.parameters(), target.parameters(), strict=True):
            target_param.lerp_(param, tau)


def dqn_learn(agent: DQN, experiences: Sequence[Any]) -> float:
    """One DQN (double or not) step: Huber TD loss, clipped gradient, Adam, soft target update."""
    obs, actions, rewards, next_obs, terminated = tuple(experiences)[:5]

    def inputs(x: Any) -> Any:
        return preprocess_observation(agent.observation_space, x, agent.device, agent.normalize_images)

    actions = torch.as_tensor(actions).long().reshape(-1, 1) - agent.action_start
    rewards = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1)
    terminated = torch.as_tensor(terminated, dtype=torch.float32).reshape(-1)
    with torch.no_grad():
        next_q_target = agent.actor_target(inputs(next_obs))
        chooser = agent.actor(inputs(next_obs)) if agent.double else next_q_target
        next_q = next_q_target.gather(-1, chooser.argmax(-1, keepdim=True)).squeeze(-1)
        target = rewards + agent.gamma * (1 - terminated) * next_q
    q_taken = agent.actor(inputs(obs)).gather(-1, actions).squeeze(-1)
    loss = F.smooth_l1_loss(q_taken, target) if agent.loss == "huber" else F.mse_loss(q_taken, target)
    agent.optimizer.zero_grad()
    loss.backward()
    if agent.max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(agent.actor.parameters(), agent.max_grad_norm)
    agent.optimizer.step()
    _soft_update(agent.actor, agent.actor_target, agent.tau)
    agent.learn_counter += 1
    return float(loss.detach())


def ddpg_learn(agent: DDPG, experiences: Sequence[Any]) -> dict[str, float]:
    """One DDPG/TD3 step: critic regression on the (clipped double-Q, smoothed) TD target, and every
    ``policy_freq``-th step a deterministic policy gradient step and soft target updates."""
    obs, actions, rewards, next_obs, terminated = tuple(experiences)[:5]
    obs, next_obs = agent._observation(obs), agent._observation(next_obs)
    actions = agent._normalise(torch.as_tensor(actions, dtype=torch.float32).reshape(-1, agent.action_dim))
    rewards = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1, 1)
    terminated = torch.as_tensor(terminated, dtype=torch.float32).reshape(-1, 1)

    def policy(network: torch.nn.Module, x: Any) -> torch.Tensor:
        return agent._normalise(network(x).reshape(-1, agent.action_dim))

    with torch.no_grad():
        next_actions = policy(agent.actor_target, next_obs)
        if isinstance(agent, TD3):
            noise = np.clip(agent.rng.normal(0.0, agent.policy_noise, size=tuple(next_actions.shape)),
                            -agent.noise_clip, agent.noise_clip)
            next_actions = (next_actions + torch.as_tensor(noise, dtype=torch.float32)).clamp(-1.0, 1.0)
        bootstrap = torch.stack([critic(next_obs, next_actions) for critic in agent.critic_targets]).amin(dim=0)
        target = rewards + agent.gamma * (1.0 - terminated) * bootstrap
    critic_loss = sum(F.mse_loss(critic(obs, actions), target) for critic in agent.critics)
    agent.critic_optimizer.zero_grad()
    critic_loss.backward()  # type: ignore[union-attr]
    agent.critic_optimizer.step()
    losses = {"critic": float(critic_loss.detach())}  # type: ignore[union-attr]
    agent.learn_counter += 1
    if agent.learn_counter % agent.policy_freq == 0:
        critic = agent.critics[0]
        critic.requires_grad_(False)
        actor_loss = -critic(obs, policy(agent.actor, obs)).mean()
        agent.actor_optimizer.zero_grad()
        actor_loss.backward()
        agent.actor_optimizer.step()
        critic.requires_grad_(True)
        losses["actor"] = float(actor_loss.detach())
        for online, target_net in agent.target_pairs():
            _soft_update(online, target_net, agent.tau)
    if agent.share_encoders:
        agent._share_encoder_weights()
    return losses


def rainbow_learn(agent: RainbowDQN, experiences: Sequence[Any],
                  n_experiences: Sequence[Any] | None = None) -> tuple[float, np.ndarray]:
    """One Rainbow step: C51 cross-entropy to the projected double-Q target (n-step discounts,
    PER importance weights, the n-step loss alone or joined to the 1-step one), clipped gradient,
    Adam, soft target update (parameters only), then fresh noise from the agent's RNG."""
    for network in (agent.actor, agent.actor_target):
        network.train()

    def distribution_loss(batch: Sequence[Any]) -> torch.Tensor:
        obs, actions, rewards, next_obs, terminated = tuple(batch)[:5]
        n_steps = getattr(batch, "n_steps", None)
        actions = torch.as_tensor(actions).long().reshape(-1) - agent.action_start
        rewards = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1)
        terminated = torch.as_tensor(terminated, dtype=torch.float32).reshape(-1)
        if n_steps is None:
            discounts = torch.full_like(rewards, agent.gamma)
        else:
            steps = torch.as_tensor(n_steps, dtype=torch.float32).reshape(-1)
            discounts = torch.pow(torch.full_like(steps, agent.gamma), steps)
        rows = torch.arange(actions.shape[0])
        with torch.no_grad():
            next_inputs = agent._observation(next_obs)
            next_actions = agent.actor(next_inputs, "q").argmax(dim=-1)
            next_probs = agent.actor_target(next_inputs, "probs")[rows, next_actions]
            target = project_distribution(next_probs, rewards, discounts * (1.0 - terminated), agent.actor.support)
        log_probs = agent.actor(agent._observation(obs), "log_probs")[rows, actions]
        return -(target * log_probs).sum(dim=-1)

    weights = getattr(experiences, "weights", None)
    if n_experiences is None:
        per_sample = distribution_loss(experiences)
    else:
        per_sample = distribution_loss(n_experiences)
        if agent.combined_reward:
            per_sample = per_sample + distribution_loss(experiences)
    if weights is None:
        loss = per_sample.mean()
    else:
        loss = (per_sample * torch.as_tensor(weights, dtype=torch.float32).reshape(-1)).mean()
    agent.optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(agent.actor.parameters(), agent.max_grad_norm)
    agent.optimizer.step()
    _soft_update(agent.actor, agent.actor_target, agent.tau)
    buffers = [buffer for network in (agent.actor, agent.actor_target) for module in network.modules()
               if isinstance(module, NoisyLinear) for buffer in (module.eps_in, module.eps_out)]
    noise = agent.rng.standard_normal(sum(buffer.numel() for buffer in buffers))  # one draw, inputs first
    start = 0
    for buffer in buffers:  # f(x) = sign(x) sqrt(|x|)
        part = torch.as_tensor(noise[start:start + buffer.numel()])
        buffer.copy_((part.sign() * part.abs().sqrt()).to(buffer.dtype))
        start += buffer.numel()
    agent.learn_counter += 1
    priorities = per_sample.detach().numpy().astype(np.float64) + agent.prior_eps
    return float(loss.detach()), priorities


def rainbow_act(agent: RainbowDQN, obs: Any, action_mask: Any = None, training: bool = True) -> np.ndarray:
    """Rainbow's action choice: the argmax of the expected return (noisy in training, mean weights
    otherwise), restricted by an action mask."""
    agent.actor.train(training)
    with torch.no_grad():
        q_values = agent.actor(agent._observation(obs), "q").reshape(-1, agent.num_actions)
    agent.actor.train()
    if action_mask is not None:
        allowed = torch.as_tensor(np.asarray(action_mask, dtype=bool).reshape(q_values.shape))
        q_values = q_values.masked_fill(~allowed, -torch.inf)
    return q_values.argmax(dim=-1).numpy().astype(np.int64) + agent.action_start
