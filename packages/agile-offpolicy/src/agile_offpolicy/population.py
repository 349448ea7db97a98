"""The population-batched off-policy phase: every agent collects and learns at the same time.

The population steps one vector env with ``agents x num_envs`` sub-envs (agent ``p`` owns the
consecutive slice ``[p * num_envs, (p + 1) * num_envs)``). Agents whose networks stack form a
:class:`~agile_core.algorithms.group.MemberGroup` that acts and learns as one computation through
the algorithm's own population-shaped step (``act_population`` / ``learn_population``); each agent
keeps its own epsilon schedule position, exploration noise, learn step, batch size and
hyperparameters. Transitions of all agents go to the shared replay memory in one call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from agile_core.algorithms.group import (
    MemberGroup,
    PopulationBatch,
    make_member_groups,
    member_rows,
)
from agile_core.networks.stacked import NotStackableError
from agile_core.training import EpsilonSchedule, swap_image_channels
from agile_core.training.evaluation import evaluate_population_batched
from agile_core.training.generations import PhaseResult
from agile_core.training.population import (
    agent_rows,
    log_once,
    pad_index_batches,
    start_population_phase,
)
from agile_core.training.profiling import PROFILER
from agile_offpolicy.buffers import ReplayBuffer

__all__ = ["can_batch", "collect_and_learn_population", "evaluate_batched", "make_groups", "record_losses",
           "sample_padded"]

Groups = list[tuple[list[int], MemberGroup]]


def can_batch(population: Sequence[Any], memory: Any) -> bool:
    """Whether the batched phase supports these agents (each has a population-shaped step and
    ``act_population``) and this memory (uniform replay); says why not once, in a warning."""
    if type(memory) is not ReplayBuffer or not population:
        return False
    try:
        for agent in population:
            agent.check_population_support()
    except NotStackableError as error:
        log_once(f"population not batched: {error}")
        return False
    return True


def make_groups(population: Sequence[Any]) -> Groups:
    """Agents grouped by algorithm, settings and network structure (agents that cannot stack
    with others get groups of their own), each group stacked. Within a group, agents are ordered by
    learn step (stable), so the agents that learn most often are adjacent."""
    return make_member_groups(population, order=lambda agent: agent.learn_step)


def sample_padded(memory: ReplayBuffer, members: Sequence[Any], active: Sequence[bool],
                  device: torch.device | str) -> PopulationBatch:
    """One batch per active member, drawn with the member's own ``rng`` exactly as
    ``memory.sample(member.batch_size, member.rng)`` draws it, gathered in one call and laid out
    ``[P, max_batch, ...]``; padded rows repeat a valid index and carry zero weight."""
    indices = [memory.sample_indices(m.batch_size, getattr(m, "rng", None)) if on else np.zeros(0, dtype=np.int64)
               for m, on in zip(members, active, strict=True)]
    padded, weights = pad_index_batches(indices)
    batch = memory.sample_from_indices(padded.reshape(-1))
    members_count = padded.shape[0]
    obs, action, reward, next_obs, done = (member_rows(field, members_count) for field in
                                           (batch.obs, batch.action, batch.reward, batch.next_obs, batch.done))
    return PopulationBatch(obs=obs, action=action, reward=reward.to(torch.float32), next_obs=next_obs,
                           done=done.to(torch.float32), weights=torch.as_tensor(weights, device=device))


def _act(groups: Groups, obs: Any, epsilons: Sequence[float], num_envs: int, masks: Any, agents: int,
         training: bool = True) -> np.ndarray:
    """Actions ``[agents * num_envs, ...]`` for the population's observations (greedy without `training`)."""
    actions: np.ndarray | None = None
    masks = None if masks is None else np.asarray(masks)
    for slots, group in groups:
        whole = len(groups) == 1 and slots == list(range(agents))
        rows = None if whole else agent_rows(slots, num_envs)
        part_obs = obs if rows is None else _take(obs, rows)
        part_masks = None if masks is None else (masks if rows is None else masks[rows])
        chosen = _group_act(group, part_obs, [epsilons[slot] for slot in slots], part_masks, training)
        if rows is None:
            return chosen
        if actions is None:
            actions = np.empty((agents * num_envs, *chosen.shape[1:]), dtype=chosen.dtype)
        actions[rows] = chosen
    assert actions is not None
    return actions


def _group_act(group: MemberGroup, obs: Any, epsilons: Sequence[float], masks: np.ndarray | None,
               training: bool) -> np.ndarray:
    first = group.members[0]
    inputs = first.population_inputs(member_rows(obs, len(group)))
    member_masks = None if masks is None else list(member_rows(masks, len(group)))
    return group.algorithm.act_population(group, inputs, epsilons, member_masks, training=training)


def _take(obs: Any, rows: np.ndarray) -> Any:
    if isinstance(obs, Mapping):
        return {key: _take(value, rows) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_take(value, rows) for value in obs)
    return np.asarray(obs)[rows]


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
    while steps < vector_steps and not should_stop():
        epsilons = [schedule.value(agent.steps / num_envs) for agent in population]
        with PROFILER.act:
            action = _act(groups, obs, epsilons, num_envs, info.get("action_mask"), agents)
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
    for agent, result, (returns, lengths) in zip(population, results, tracker.pop_finished_by_agent(agents),
                                                 strict=True):
        result.vector_steps = steps
        result.episodic_returns, result.episode_lengths = returns, lengths
        if returns:
            agent.scores.append(float(np.mean(returns)))
    return results


def _learn(population: list[Any], groups: Groups, memory: ReplayBuffer,
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
            view = group.select(active)  # the members a partial round needs, when they are fewer
            part = active[view.offset:view.offset + len(view)]
            with PROFILER.sample:
                batch = sample_padded(memory, view.members, part, group.device)
            with PROFILER.learn:
                losses = group.algorithm.learn_population(view, batch, part)
            for slot, loss in zip(slots[view.offset:view.offset + len(view)], losses, strict=True):
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
        return _act(groups, obs, [0.0] * agents, num_envs, info.get("action_mask"), agents, training=False)

    return evaluate_population_batched(population, env, act, loop=loop, max_steps=max_steps,
                                       swap_channels=swap_channels)
