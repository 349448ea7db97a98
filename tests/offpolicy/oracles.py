"""Per-agent reference learning steps, written plainly with one agent's own networks and
``torch.optim.Adam``: the oracles the population-shaped steps (``learn_population``) are tested
against. They live only here; the packages define each algorithm once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from agile_core.networks import preprocess_observation
from agile_offpolicy.ddpg import DDPG
from agile_offpolicy.dqn import DQN
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
    loss = F.smooth_l1_loss(agent.actor(inputs(obs)).gather(-1, actions).squeeze(-1), target)
    agent.optimizer.zero_grad()
    loss.backward()
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
