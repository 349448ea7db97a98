"""Plain per-agent references for IPPO, written with one agent's own networks, its own
``torch.optim.Adam`` and Python loops: GAE of one agent's column, and one IPPO update.
:meth:`IPPO.learn_population` (and so ``IPPO.learn``) is tested against them; they live only here."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agile_core.networks.preprocessing import preprocess_observation
from agile_marl.buffers.rollout import MultiAgentRolloutBuffer
from agile_marl.ippo import IPPO

NAMES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


def gae_by_hand(rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                valid: np.ndarray, final_values: np.ndarray, last_value: float, gamma: float,
                lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE of one agent in one sub-env, ``[T]`` arrays, step by step backwards in float64.

    A valid step bootstraps from nothing when it terminated, from ``final_values[t]`` when it
    truncated, else from the next step's value (``last_value`` after the last one); the sum of
    discounted deltas stops at a termination or truncation; invalid steps get advantage 0."""
    steps = len(rewards)
    advantages = np.zeros(steps)
    following = 0.0
    for t in reversed(range(steps)):
        if not valid[t]:
            advantages[t] = 0.0
            following = 0.0
            continue
        if terminated[t]:
            nxt, carry = 0.0, 0.0
        elif truncated[t]:
            nxt, carry = float(final_values[t]), 0.0
        else:
            nxt = float(values[t + 1]) if t + 1 < steps else float(last_value)
            carry = following
        delta = float(rewards[t]) + gamma * nxt - float(values[t])
        advantages[t] = delta + gamma * lam * carry
        following = advantages[t]
    return advantages, advantages + np.asarray(values, dtype=np.float64)


def _group_rows(agent: IPPO, buffer: MultiAgentRolloutBuffer, key: str) -> dict[str, Any]:
    """Agent group `key`'s valid rows: agent after agent, (step, env) order within each."""
    n = buffer.size
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in ("obs", "actions", "log_probs", "values",
                                                                  "advantages", "returns", "masks")}
    space = agent.group_space(key)
    for agent_id in agent.agent_groups[key]:
        rollout = buffer.agents[agent_id]
        for t in range(n):
            for env in range(buffer.num_envs):
                if not bool(rollout.valid[t, env]):
                    continue
                store = rollout.observations
                parts["obs"].append({k: v[t, env] for k, v in store.items()} if isinstance(store, dict) else store[t, env])
                parts["actions"].append(rollout.actions[t, env])
                for name in ("log_probs", "values", "advantages", "returns"):
                    parts[name].append(getattr(rollout, name)[t, env])
                if isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
                    mask = rollout.action_masks[t, env] if rollout.action_masks is not None else \
                        torch.ones(int(np.sum(getattr(space, "nvec", getattr(space, "n", 0)))), dtype=torch.bool)
                    parts["masks"].append(mask)
    out: dict[str, Any] = {name: torch.stack(values) for name, values in parts.items() if values and name != "obs"}
    first = parts["obs"][0]
    out["obs"] = {k: torch.stack([o[k] for o in parts["obs"]]) for k in first} if isinstance(first, dict) \
        else torch.stack(parts["obs"])
    out["masks_used"] = torch.tensor(any(buffer.agents[a].action_masks is not None for a in agent.agent_groups[key]))
    return out


def _loss(agent: IPPO, key: str, rows: dict[str, Any], index: np.ndarray) -> dict[str, torch.Tensor]:
    actor = getattr(agent, agent.net_name("actor", key))
    critic = getattr(agent, agent.net_name("critic", key))
    obs_space = agent.observation_spaces[agent.agent_groups[key][0]]
    idx = torch.as_tensor(index)
    stored = rows["obs"]
    obs = preprocess_observation(obs_space, {k: v[idx] for k, v in stored.items()} if isinstance(stored, dict)
                                 else stored[idx])
    mask = rows["masks"][idx] if bool(rows["masks_used"]) else None
    dist = actor.distribution_from_latent(actor.encode(obs)[0], mask)
    actions = rows["actions"][idx]
    if not isinstance(agent.group_space(key), spaces.Discrete):
        actions = actions.reshape(len(index), -1)
    log_prob, entropy = dist.log_prob(actions), dist.entropy()
    value = critic(obs).squeeze(-1)
    advantages = rows["advantages"][idx]
    if agent.normalize_advantages and len(index) > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std(correction=0) + 1e-8)
    log_ratio = log_prob - rows["log_probs"][idx]
    ratio = log_ratio.exp()
    eps = agent.clip_coef
    policy_loss = -torch.min(ratio * advantages, ratio.clamp(1 - eps, 1 + eps) * advantages).mean()
    error = (value - rows["returns"][idx]).pow(2)
    if agent.clip_vloss:
        old = rows["values"][idx]
        error = torch.max(error, (old + (value - old).clamp(-eps, eps) - rows["returns"][idx]).pow(2))
    value_loss = 0.5 * error.mean()
    entropy_mean = entropy.mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > eps).float().mean()
    loss = policy_loss + agent.vf_coef * value_loss - agent.ent_coef * entropy_mean
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy_mean,
            "approx_kl": approx_kl, "clip_fraction": clip_fraction}


def ippo_learn(agent: IPPO, buffer: MultiAgentRolloutBuffer) -> dict[str, float]:
    """One IPPO update of a single agent that never joins a group: for every agent group in
    turn, ``update_epochs`` permutations of its rows from ``agent.rng``, minibatches of
    ``batch_size``, a clipped Adam step each, stopping that group at a KL above ``target_kl``."""
    result: dict[str, float] = {}
    for key in agent.agent_groups:
        rows = _group_rows(agent, buffer, key)
        count = rows["log_probs"].shape[0]
        optimizer: torch.optim.Optimizer = getattr(agent, agent.optimizer_name(key))
        params = [p for group in optimizer.param_groups for p in group["params"]]
        totals = dict.fromkeys(NAMES, 0.0)
        steps = epochs = 0
        stopped = False
        for _ in range(agent.update_epochs):
            epochs += 1
            order = agent.rng.permutation(count)
            for begin in range(0, count, agent.batch_size):
                stats = _loss(agent, key, rows, order[begin:begin + agent.batch_size])
                if agent.target_kl is not None and float(stats["approx_kl"]) > agent.target_kl:
                    stopped = True
                    break
                optimizer.zero_grad()
                stats["loss"].backward()
                nn.utils.clip_grad_norm_(params, agent.max_grad_norm)
                optimizer.step()
                for name in NAMES:
                    totals[name] += float(stats[name].detach())
                steps += 1
            if stopped:
                break
        for name in NAMES:
            result[f"{key}.{name}"] = totals[name] / steps if steps else float("nan")
        result.update({f"{key}.epochs": float(epochs), f"{key}.minibatches": float(steps),
                       f"{key}.early_stop": float(stopped)})
    agent.learn_counter += 1
    return result
