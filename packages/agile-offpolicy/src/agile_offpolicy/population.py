"""The population-batched off-policy phase: every agent collects and learns at the same time.

The population steps one vector env with ``agents x num_envs`` sub-envs (agent ``p`` owns the
consecutive slice ``[p * num_envs, (p + 1) * num_envs)``). A population of plain DQN, of plain
DDPG or of plain TD3 agents is supported: agents with the same network structure form a group
(:class:`~agile_offpolicy.dqn_population.DQNGroup` or
:class:`~agile_offpolicy.ddpg_population.DDPGGroup`) that acts and learns as one stacked
computation; each agent keeps its own epsilon schedule position, exploration noise, learn step,
batch size and hyperparameters. Transitions of all agents go to the shared replay memory in one call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

from agile_core.networks.stacked import structure_key
from agile_core.training import EpsilonSchedule, swap_image_channels
from agile_core.training.evaluation import evaluate_population_batched
from agile_core.training.generations import PhaseResult
from agile_core.training.population import (
    agent_rows,
    all_stackable,
    group_by_architecture,
    start_population_phase,
)
from agile_core.training.profiling import PROFILER
from agile_offpolicy.buffers import ReplayBuffer
from agile_offpolicy.ddpg import DDPG
from agile_offpolicy.ddpg_population import DDPGGroup
from agile_offpolicy.dqn import DQN
from agile_offpolicy.dqn_population import DQNGroup
from agile_offpolicy.td3 import TD3

__all__ = ["can_batch", "collect_and_learn_population", "evaluate_batched", "make_groups", "record_losses"]

Group = DQNGroup | DDPGGroup
GROUPS: dict[type, tuple[type[DQNGroup] | type[DDPGGroup], Callable[[Any], str]]] = {
    DQN: (DQNGroup, lambda agent: structure_key(agent.actor)),
    DDPG: (DDPGGroup, DDPGGroup.group_key),
    TD3: (DDPGGroup, DDPGGroup.group_key),
}
"""Agent type -> (its group class, the key of agents that can share a group)."""


def can_batch(population: Sequence[Any], memory: Any) -> bool:
    """Whether the batched phase supports these agents (all plain DQN, all plain DDPG or all plain
    TD3, with stackable networks) and this memory (uniform replay)."""
    if type(memory) is not ReplayBuffer or not population:
        return False
    kind = type(population[0])
    return kind in GROUPS and all_stackable(population, kind, GROUPS[kind][0])


def make_groups(population: Sequence[Any]) -> list[tuple[list[int], Group]]:
    """Agents grouped by architecture, each group stacked. Within a group, agents are ordered by
    learn step (stable), so the agents that learn most often are adjacent and a round only
    they take runs on a short range of members."""
    build, key = GROUPS[type(population[0])]
    return group_by_architecture(population, key, build, order=lambda agent: agent.learn_step)


def _act(groups: list[tuple[list[int], Group]], obs: np.ndarray, epsilons: Sequence[float], num_envs: int,
         masks: Any, agents: int, training: bool = True) -> np.ndarray:
    """Actions ``[agents * num_envs, ...]`` for the population's observations (greedy without `training`)."""
    if len(groups) == 1 and groups[0][0] == list(range(agents)):
        return groups[0][1].act(obs, epsilons, masks, training=training)
    actions: np.ndarray | None = None
    masks = None if masks is None else np.asarray(masks)
    for slots, group in groups:
        rows = agent_rows(slots, num_envs)
        chosen = group.act(obs[rows], [epsilons[slot] for slot in slots], None if masks is None else masks[rows],
                           training=training)
        if actions is None:
            actions = np.empty((agents * num_envs, *chosen.shape[1:]), dtype=chosen.dtype)
        actions[rows] = chosen
    assert actions is not None
    return actions


def _reset_noise(population: Sequence[Any], num_envs: int, ended: np.ndarray | None = None) -> None:
    """Restart the exploration noise of agents that have a process (DDPG, TD3) as the one-agent
    loop does: all of it at a phase start (`ended` None), else for each agent's ended sub-envs."""
    for slot, agent in enumerate(population):
        reset = getattr(agent, "reset_action_noise", None)
        if reset is not None:
            reset(None if ended is None else ended[slot * num_envs:(slot + 1) * num_envs])


def collect_and_learn_population(population: list[Any], env: VectorEnv, memory: ReplayBuffer, vector_steps: int,
                                 schedule: EpsilonSchedule, learning_delay: int, learn_credit: list[int],
                                 swap_channels: bool, should_stop: Callable[[], bool]) -> list[PhaseResult]:
    """Run the whole population for up to `vector_steps` vector steps from a fresh reset of `env`
    (the population env); the batched counterpart of the one-agent phase in ``training.py``,
    with the same learn-credit and warm-up rules per agent."""
    agents = len(population)
    num_envs, tracker, obs, info = start_population_phase(env, agents, swap_channels)
    results = [PhaseResult(vector_steps=0) for _ in population]
    groups = make_groups(population)
    noisy = any(hasattr(agent, "reset_action_noise") for agent in population)
    if noisy:
        _reset_noise(population, num_envs)
    steps = 0
    try:
        while steps < vector_steps and not should_stop():
            epsilons = [schedule.value(agent.steps / num_envs) for agent in population]
            with PROFILER.act:
                action = _act(groups, np.asarray(obs), epsilons, num_envs, info.get("action_mask"), agents)
            with PROFILER.env:
                next_obs, reward, terminated, truncated, info = env.step(action)
            if swap_channels:
                next_obs = swap_image_channels(next_obs)
            valid = tracker.step(reward, terminated, truncated)
            memory.add(obs, action, reward, next_obs, terminated, truncated=truncated, mask=valid)
            if noisy:
                _reset_noise(population, num_envs, np.asarray(terminated) | np.asarray(truncated))
            obs = next_obs
            steps += 1
            _learn(population, groups, memory, learning_delay, learn_credit, num_envs, results)
    finally:
        for _, group in groups:
            group.copy_to_members()
    for agent, result, (returns, lengths) in zip(population, results, tracker.pop_finished_by_agent(agents),
                                                 strict=True):
        result.vector_steps = steps
        result.episodic_returns, result.episode_lengths = returns, lengths
        if returns:
            agent.scores.append(float(np.mean(returns)))
    return results


def _learn(population: list[Any], groups: list[tuple[list[int], Group]], memory: ReplayBuffer,
           learning_delay: int, learn_credit: list[int], num_envs: int, results: list[PhaseResult]) -> None:
    """Account one vector step per agent and run the learning steps it pays for, group by group."""
    updates = []
    for slot, agent in enumerate(population):
        agent.steps += num_envs
        count, learn_credit[slot] = divmod(learn_credit[slot] + num_envs, agent.learn_step)
        ready = len(memory) >= max(agent.batch_size, learning_delay)
        updates.append(count if ready else 0)
    for round_index in range(max(updates)):
        for slots, group in groups:
            active = [updates[slot] > round_index for slot in slots]
            if not any(active):
                continue
            with PROFILER.sample:
                batch = group.sample(memory, active)
            with PROFILER.learn:
                losses = group.learn(batch, active)
            for slot, loss in zip(slots, losses, strict=True):
                if loss is not None:
                    record_losses(results[slot].losses, loss)


def record_losses(losses: dict[str, list[float]], value: Any) -> None:
    """A learn step returns one loss (`loss`) or named losses (e.g. `critic`, `actor`)."""
    if isinstance(value, Mapping):
        for name, loss in value.items():
            losses.setdefault(str(name), []).append(float(loss))
    else:
        losses.setdefault("loss", []).append(float(value))


def evaluate_batched(population: list[Any], env: VectorEnv, *, loop: int, max_steps: int | None,
                     swap_channels: bool) -> list[float]:
    """Greedy fitness of every agent at once in the population env (appended to ``fitness``)."""
    agents = len(population)
    num_envs = env.num_envs // agents
    groups = make_groups(population)

    def act(obs: Any, info: dict[str, Any]) -> np.ndarray:
        return _act(groups, np.asarray(obs), [0.0] * agents, num_envs, info.get("action_mask"), agents,
                    training=False)

    return evaluate_population_batched(population, env, act, loop=loop, max_steps=max_steps,
                                       swap_channels=swap_channels)
