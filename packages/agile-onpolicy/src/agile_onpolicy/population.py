"""The population-batched on-policy phase: every agent collects and learns at the same time.

The population steps one vector env with ``agents x num_envs`` sub-envs (agent ``p`` owns the
consecutive slice ``[p * num_envs, (p + 1) * num_envs)``). Agents whose networks stack form a
:class:`~agile_core.algorithms.group.MemberGroup` that acts and learns as one computation through
PPO's own population-shaped steps (:meth:`PPO.act_population`, :meth:`PPO.learn_population`); an
agent that stacks with no other (a Gaussian policy, convolutions, another architecture) is a group
of its own, run through the same steps. Every agent keeps its own rollout buffer, so its own
rollout length (``learn_step // num_envs``), ``gamma`` and ``gae_lambda``; rows are written,
bootstrapped and masked exactly as :func:`agile_onpolicy.collect.collect_rollouts` does (the
next-step autoreset row is invalid; a valid truncation bootstraps from ``V`` of the observation
that step returned), and when an agent's rollout is full its advantages are computed and its group
learns from it (together with every other member whose rollout is full at that step).

Like the agent-by-agent phase, each agent collects whole rollouts until it has taken at least
the phase's vector steps (or a stop is requested), starting from a reset of the env. An agent
that is done while others still collect sits out: its sub-envs keep stepping, but nothing is
recorded for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from agile_core.algorithms.group import MemberGroup, make_member_groups, member_rows
from agile_core.networks.stacked import NotStackableError
from agile_core.training import EpisodeTracker, swap_image_channels
from agile_core.training.evaluation import evaluate_population_batched
from agile_core.training.generations import PhaseResult
from agile_core.training.population import agent_rows, log_once, start_population_phase
from agile_core.training.profiling import PROFILER
from agile_onpolicy.ppo import PPO
from agile_onpolicy.rollout import RolloutBuffer, compute_returns_and_advantages_together

__all__ = ["can_batch", "collect_and_learn_population", "evaluate_batched", "make_groups"]

Groups = list[tuple[list[int], MemberGroup]]


def can_batch(population: Sequence[Any]) -> bool:
    """Whether the batched phase supports these agents: PPO agents (or subclasses that keep its
    learning step) with array observations and feed-forward policies; says why not once (log)."""
    reason = None
    for agent in population:
        if not isinstance(agent, PPO):
            reason = f"{type(agent).__name__} is not a PPO agent"
        elif agent.recurrent:
            reason = "recurrent PPO agents collect one by one (their state is not carried in the batched phase)"
        elif isinstance(agent.observation_space, spaces.Dict | spaces.Tuple):
            reason = f"{type(agent.observation_space).__name__} observations are collected one by one"
        else:
            try:
                agent.check_population_support()
            except NotStackableError as error:
                reason = str(error)
        if reason is not None:
            log_once(f"population not batched: {reason}")
            return False
    return bool(population)


def make_groups(population: Sequence[PPO]) -> Groups:
    """Agents grouped by settings and network structure (slot order kept within a group), each
    group stacked; agents whose networks do not stack together get groups of their own."""
    return make_member_groups(population)


Outputs = tuple[np.ndarray, ...]


def _by_group(groups: Groups, num_envs: int, obs: Any, mask: torch.Tensor | None,
              call: Callable[[MemberGroup, Any, torch.Tensor | None], Outputs]) -> Outputs:
    """``call(group, its network inputs [G, num_envs, ...], its masks [G, num_envs, n])`` for every
    group, the per-row outputs put back in population order (``[agents * num_envs, ...]``)."""
    def run(group: MemberGroup, rows_obs: Any, rows_mask: torch.Tensor | None) -> Outputs:
        size = len(group)
        inputs = group.members[0].population_inputs(member_rows(rows_obs, size))
        return call(group, inputs, None if rows_mask is None else rows_mask.reshape(size, num_envs, -1))

    if len(groups) == 1:
        return run(groups[0][1], obs, mask)
    obs = np.asarray(obs)
    rows = [agent_rows(slots, num_envs) for slots, _ in groups]
    parts = [run(group, obs[index], None if mask is None else mask[torch.as_tensor(index)])
             for index, (_, group) in zip(rows, groups, strict=True)]
    order = np.argsort(np.concatenate(rows))  # group-major back to slot-major rows
    return tuple(np.concatenate(field)[order] for field in zip(*parts, strict=True))


def _act_group(group: MemberGroup, inputs: Any, masks: torch.Tensor | None) -> Outputs:
    """``(raw action, log_prob, value)`` of a group's members, rows flattened member-major."""
    step = group.algorithm.act_population(group, inputs, None, masks)
    assert step.value is not None
    first = group.members[0]
    return (first.env_actions(step.action), step.log_prob.reshape(-1).cpu().numpy().astype(np.float32),
            step.value.reshape(-1).cpu().numpy().astype(np.float32))


def _act(groups: Groups, num_envs: int, obs: Any, mask: torch.Tensor | None) -> Outputs:
    """``(action, log_prob, value)`` of every agent for its slice of the population's observations."""
    return _by_group(groups, num_envs, obs, mask, _act_group)


def _values(groups: Groups, num_envs: int, obs: Any) -> np.ndarray:
    """``V(obs)`` ``[agents * num_envs]`` of every agent's slice."""
    def values(group: MemberGroup, inputs: Any, _: Any) -> Outputs:
        value = group.algorithm.value_population(group, inputs)
        return (value.reshape(-1).cpu().numpy().astype(np.float32),)

    return _by_group(groups, num_envs, obs, None, values)[0]


class _Rollout:
    """One agent's rows of its current rollout, staged in numpy until the rollout is complete
    and then written to its buffer in one :meth:`RolloutBuffer.extend` (cheaper than an ``add``
    per step and agent)."""

    OPTIONAL: ClassVar[dict[str, Any]] = {"final_value": 0.0, "action_mask": True}
    """What a step without the field stores: no truncation value, every action allowed."""

    def __init__(self, buffer: RolloutBuffer) -> None:
        self.buffer = buffer
        self.fields: dict[str, np.ndarray] = {}
        self.count = 0
        self.length = 0

    def append(self, **row: np.ndarray | None) -> bool:
        """Stage one vector step (starting a new rollout when none is under way); return True
        when the rollout is complete."""
        if self.count == 0:
            if self.buffer.full:
                self.buffer.reset()
            self.length = self.buffer.num_steps - self.buffer.size
        for name, value in row.items():
            store = self.fields.get(name)
            if value is None:  # an optional field this step lacks: as add() would store it
                if store is not None:
                    store[self.count] = self.OPTIONAL[name]
                continue
            if store is None or store.shape[0] < self.length or store.shape[1:] != value.shape:
                store = self.fields[name] = np.empty((self.length, *value.shape), dtype=value.dtype)
                store[: self.count] = self.OPTIONAL.get(name, 0)
            store[self.count] = value
        self.count += 1
        return self.count == self.length

    def write(self) -> None:
        """Write the staged rows to the buffer."""
        self.buffer.extend(**{name: store[: self.count] for name, store in self.fields.items()})
        self.count = 0


class _Collector:
    """Where each agent stands in the phase: its rollout, rollouts taken, whether it still collects."""

    def __init__(self, population: list[PPO], buffers: list[RolloutBuffer], vector_steps: int) -> None:
        self.population, self.buffers, self.vector_steps = population, buffers, vector_steps
        self.rollouts = [_Rollout(buffer) for buffer in buffers]
        self.results = [PhaseResult(vector_steps=0) for _ in population]
        self.stopping = False

    def collecting(self) -> list[bool]:
        """Agents that take the next vector step: mid-rollout, or still short of the phase's steps."""
        return [rollout.count > 0 or (not self.stopping and result.vector_steps < self.vector_steps)
                for rollout, result in zip(self.rollouts, self.results, strict=True)]


def collect_and_learn_population(population: list[PPO], env: VectorEnv, buffers: list[RolloutBuffer],
                                 vector_steps: int, swap_channels: bool,
                                 should_stop: Callable[[], bool]) -> list[PhaseResult]:
    """Run the whole population from a fresh reset of `env` (the population env) until every agent
    has collected and learnt from whole rollouts covering `vector_steps` vector steps (or a stop
    was requested); `buffers` holds each agent's rollout buffer for ``env.num_envs // agents``
    sub-envs. Returns one PhaseResult per agent, as the agent-by-agent phase reports it."""
    num_envs, tracker, obs, info = start_population_phase(env, len(population), swap_channels)
    state = _Collector(population, buffers, vector_steps)
    groups = make_groups(population)
    collecting = state.collecting()
    while any(collecting):
        with PROFILER.act:
            mask = population[0].prepare_action_mask(info.get("action_mask"))
            action, log_prob, value = _act(groups, num_envs, obs, mask)
            env_action = population[0].to_env_action(action)
        with PROFILER.env:
            next_obs, reward, terminated, truncated, info = env.step(env_action)
        if swap_channels:
            next_obs = swap_image_channels(next_obs)
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        reward = np.asarray(reward, dtype=np.float32)
        valid = tracker.step(reward, terminated, truncated)
        # A valid truncation bootstraps from V(final observation) = V(next_obs) here.
        next_values = _values(groups, num_envs, next_obs) if (valid & truncated & ~terminated).any() else None
        masks = None if mask is None else mask.cpu().numpy()
        full = []
        for slot, (agent, rollout) in enumerate(zip(population, state.rollouts, strict=True)):
            if not collecting[slot]:
                continue
            rows = slice(slot * num_envs, (slot + 1) * num_envs)
            if rollout.append(obs=obs[rows], action=action[rows], reward=reward[rows],
                              terminated=terminated[rows], truncated=truncated[rows], value=value[rows],
                              log_prob=log_prob[rows], valid=valid[rows],
                              final_value=None if next_values is None else next_values[rows],
                              action_mask=None if masks is None else masks[rows]):
                full.append(slot)
            agent.steps += num_envs
        if full:
            _learn(groups, state, full, next_obs, next_values, tracker.autoreset, num_envs)
        obs = next_obs
        if not state.stopping and should_stop():
            state.stopping = True
        before, collecting = collecting, state.collecting()
        if collecting != before:
            _record_episodes(state, tracker, before)
    for agent, result in zip(population, state.results, strict=True):
        if result.episodic_returns:
            agent.scores.append(float(np.mean(result.episodic_returns)))
    return state.results


def _learn(groups: Groups, state: _Collector, full: list[int], next_obs: Any, next_values: np.ndarray | None,
           autoreset: np.ndarray, num_envs: int) -> None:
    """Advantages of the agents whose rollout just filled up (bootstrapping from ``V(next_obs)``
    under the policy that collected it, as ``collect_rollouts`` does), then one update per group."""
    with PROFILER.learn:
        if next_values is None:
            next_values = _values(groups, num_envs, next_obs)
        for slot in full:
            agent, rollout = state.population[slot], state.rollouts[slot]
            rollout.write()
            rollout.buffer.gamma, rollout.buffer.gae_lambda = agent.gamma, agent.gae_lambda
            rollout.buffer.use_gae = agent.use_gae
        rows = [slice(slot * num_envs, (slot + 1) * num_envs) for slot in full]
        compute_returns_and_advantages_together([state.buffers[slot] for slot in full],
                                                [next_values[r] for r in rows], [autoreset[r] for r in rows])
        for slots, group in groups:
            learning = [state.buffers[slot] if slot in full else None for slot in slots]
            if not any(buffer is not None for buffer in learning):
                continue
            active = [buffer is not None for buffer in learning]
            for slot, stats in zip(slots, group.algorithm.learn_population(group, learning, active), strict=True):
                if stats is None:
                    continue
                result = state.results[slot]
                for key, value in stats.items():
                    result.losses.setdefault(key, []).append(float(value))
                result.vector_steps += state.buffers[slot].num_steps


def _record_episodes(state: _Collector, tracker: EpisodeTracker, collected: list[bool]) -> None:
    """Hand the episodes finished so far to the agents that were collecting while they ran."""
    for result, was_collecting, (returns, lengths) in zip(
            state.results, collected, tracker.pop_finished_by_agent(len(state.population)), strict=True):
        if was_collecting:
            result.episodic_returns += returns
            result.episode_lengths += lengths


def _greedy(group: MemberGroup, inputs: Any, masks: torch.Tensor | None) -> Outputs:
    """The members' greedy (mode / mean) raw actions, rows flattened member-major."""
    step = group.algorithm.act_population(group, inputs, None, masks, training=False, values=False)
    return (group.members[0].env_actions(step.action),)


def evaluate_batched(population: list[PPO], env: VectorEnv, *, loop: int, max_steps: int | None,
                     swap_channels: bool) -> list[float]:
    """Greedy fitness of every agent at once in the population env (appended to ``fitness``), as
    ``PPO.test`` scores one agent: its mode action, the step info's ``action_mask`` respected."""
    num_envs = env.num_envs // len(population)
    groups = make_groups(population)

    def act(obs: Any, info: dict[str, Any]) -> np.ndarray:
        mask = population[0].prepare_action_mask(info.get("action_mask"))
        action = _by_group(groups, num_envs, obs, mask, _greedy)[0]
        return population[0].to_env_action(action)

    return evaluate_population_batched(population, env, act, loop=loop, max_steps=max_steps,
                                       swap_channels=swap_channels)
