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

Recurrent (LSTM) agents stack when their LSTMs have the same sizes. Each group carries its
members' recurrent state ``[G, layers, num_envs, H]`` from step to step, zeroed for a sub-env
before the first step of each of its episodes, and every row stores the state it was fed with
its episode-start flag, as ``collect_rollouts`` does, so BPTT replays what was computed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

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
from agile_core.training.tensor_tree import map_tree
from agile_onpolicy.collect import fit_buffer_hidden_states
from agile_onpolicy.ppo import PPO
from agile_onpolicy.ppo_hidden import HiddenStates
from agile_onpolicy.rollout import RolloutBuffer, compute_returns_and_advantages_together

__all__ = ["can_batch", "collect_and_learn_population", "evaluate_batched", "make_groups"]

Groups = list[tuple[list[int], MemberGroup]]


def can_batch(population: Sequence[Any]) -> bool:
    """Whether the batched phase supports these agents: PPO agents (or subclasses that keep its
    learning step) with array observations; says why not once (log)."""
    reason = None
    for agent in population:
        if not isinstance(agent, PPO):
            reason = f"{type(agent).__name__} is not a PPO agent"
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


GroupCall = Callable[[int, MemberGroup, Any, torch.Tensor | None], Outputs]
"""``call(group index, group, its network inputs [G, num_envs, ...], its masks [G, num_envs, n])``."""


def _by_group(groups: Groups, num_envs: int, obs: Any, mask: torch.Tensor | None, call: GroupCall) -> Outputs:
    """`call` for every group, the per-row outputs put back in population order
    (``[agents * num_envs, ...]``)."""
    def run(index: int, group: MemberGroup, rows_obs: Any, rows_mask: torch.Tensor | None) -> Outputs:
        size = len(group)
        inputs = group.members[0].population_inputs(member_rows(rows_obs, size))
        return call(index, group, inputs, None if rows_mask is None else rows_mask.reshape(size, num_envs, -1))

    if len(groups) == 1:
        return run(0, groups[0][1], obs, mask)
    obs = np.asarray(obs)
    rows = [agent_rows(slots, num_envs) for slots, _ in groups]
    parts = [run(position, group, obs[index], None if mask is None else mask[torch.as_tensor(index)])
             for position, (index, (_, group)) in enumerate(zip(rows, groups, strict=True))]
    order = np.argsort(np.concatenate(rows))  # group-major back to slot-major rows
    return tuple(np.concatenate(field)[order] for field in zip(*parts, strict=True))


class _States:
    """The recurrent state each group feeds its members' sub-envs (None for feed-forward groups):
    leaves ``[G, layers, num_envs, H]``, zeroed for a sub-env before its episodes' first steps."""

    def __init__(self, groups: Groups, num_envs: int) -> None:
        self.groups, self.num_envs = groups, num_envs
        self.current: list[HiddenStates | None] = [None] * len(groups)
        self.reset()

    def reset(self) -> None:
        """Zero states for every group (a fresh reset of the env)."""
        self.current = [_zero_state(group, self.num_envs) for _, group in self.groups]

    def fed(self, episode_start: np.ndarray) -> list[HiddenStates | None]:
        """Each group's state with the sub-envs whose episode begins at this step
        (`episode_start` ``[agents * num_envs]``) zeroed: what the policy is fed."""
        fed: list[HiddenStates | None] = []
        for (slots, _), state in zip(self.groups, self.current, strict=True):
            starts = None if state is None else episode_start[agent_rows(slots, self.num_envs)]
            if state is None or starts is None or not starts.any():
                fed.append(state)
                continue
            keep = torch.as_tensor(~starts).reshape(len(slots), 1, self.num_envs, 1)
            fed.append(map_tree(lambda leaf, keep=keep: leaf * keep.to(leaf.device, leaf.dtype), state))
        return fed


def _zero_state(group: MemberGroup, num_envs: int) -> HiddenStates | None:
    """Zero recurrent state of a group's members ``[G, layers, num_envs, H]`` (None unless recurrent)."""
    if not cast(PPO, group.members[0]).recurrent:
        return None
    return cast(PPO, group.members[0]).population_hidden(group, num_envs)


def _act(groups: Groups, num_envs: int, obs: Any, mask: torch.Tensor | None,
         fed: list[HiddenStates | None]) -> tuple[Outputs, list[HiddenStates | None]]:
    """``(action, log_prob, value)`` of every agent for its slice of the population's
    observations (recurrent groups fed `fed`), and each group's new recurrent state."""
    new: list[HiddenStates | None] = [None] * len(groups)

    def act(index: int, group: MemberGroup, inputs: Any, masks: torch.Tensor | None) -> Outputs:
        step = group.algorithm.act_population(group, inputs, None, masks, hidden_state=fed[index])
        assert step.value is not None
        new[index] = step.hidden
        return (group.members[0].env_actions(step.action), _host_floats(step.log_prob), _host_floats(step.value))

    return _by_group(groups, num_envs, obs, mask, act), new


def _values(groups: Groups, num_envs: int, obs: Any, states: list[HiddenStates | None]) -> np.ndarray:
    """``V(obs)`` ``[agents * num_envs]`` of every agent's slice (recurrent groups given `states`)."""
    def values(index: int, group: MemberGroup, inputs: Any, _: Any) -> Outputs:
        return (_host_floats(group.algorithm.value_population(group, inputs, states[index])),)

    return _by_group(groups, num_envs, obs, None, values)[0]


def _host_floats(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's values as a flat float32 numpy array (no copy for a float32 CPU tensor)."""
    return tensor.reshape(-1).cpu().numpy().astype(np.float32, copy=False)


def _member_states(groups: Groups, states: list[HiddenStates | None], size: int) -> list[Any]:
    """Each agent's part of its group's state, cut to its own LSTM size, as numpy views
    ``{name: (h, c)}`` (None when feed-forward): one host copy per group leaf, not per member."""
    per_agent: list[Any] = [None] * size
    for (slots, group), state in zip(groups, states, strict=True):
        if state is None:
            continue
        arrays = {name: (h.cpu().numpy(), c.cpu().numpy()) for name, (h, c) in state.items()}
        for slot, own in zip(slots, cast(PPO, group.members[0]).member_hidden(group, arrays), strict=True):
            per_agent[slot] = own
    return per_agent


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

    def append(self, hidden: Any = None, **row: np.ndarray | None) -> bool:
        """Stage one vector step (starting a new rollout when none is under way); return True
        when the rollout is complete. `hidden` is the recurrent state the step was fed
        (``{name: (h, c)}`` numpy, policy convention; recurrent agents only)."""
        if self.count == 0:
            if self.buffer.full:
                self.buffer.reset()
            self.length = self.buffer.num_steps - self.buffer.size
        if hidden is not None:
            row.update({f"hidden/{name}/{k}": pair[k] for name, pair in hidden.items() for k in range(2)})
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
        fields = {name: store[: self.count] for name, store in self.fields.items()}
        hidden: dict[str, list[np.ndarray]] = {}
        for name in [name for name in fields if name.startswith("hidden/")]:
            _, state, _ = name.split("/")
            hidden.setdefault(state, []).append(fields.pop(name))
        self.buffer.extend(**fields, hidden={name: tuple(pair) for name, pair in hidden.items()} or None)
        self.count = 0


class _Collector:
    """Where each agent stands in the phase: its rollout, rollouts taken, whether it still collects."""

    def __init__(self, population: list[PPO], buffers: list[RolloutBuffer], vector_steps: list[int]) -> None:
        self.population, self.buffers, self.vector_steps = population, buffers, list(vector_steps)
        self.rollouts = [_Rollout(buffer) for buffer in buffers]
        self.results = [PhaseResult(vector_steps=0) for _ in population]
        self.stopping = False

    def collecting(self) -> list[bool]:
        """Agents that take the next vector step: mid-rollout, or still short of the phase's steps."""
        return [rollout.count > 0 or (not self.stopping and result.vector_steps < steps)
                for rollout, result, steps in zip(self.rollouts, self.results, self.vector_steps, strict=True)]


def collect_and_learn_population(population: list[PPO], env: VectorEnv, buffers: list[RolloutBuffer],
                                 vector_steps: list[int], swap_channels: bool,
                                 should_stop: Callable[[], bool]) -> list[PhaseResult]:
    """Run the whole population from a fresh reset of `env` (the population env) until every agent
    has collected and learnt from whole rollouts covering its `vector_steps` (one count per agent;
    or a stop was requested); `buffers` holds each agent's rollout buffer for
    ``env.num_envs // agents`` sub-envs. Returns one PhaseResult per agent, as the agent-by-agent
    phase reports it (the vector steps each agent took)."""
    num_envs, tracker, obs, info = start_population_phase(env, len(population), swap_channels)
    state = _Collector(population, buffers, vector_steps)
    groups = make_groups(population)
    states = _States(groups, num_envs)
    for agent, buffer in zip(population, buffers, strict=True):
        if agent.recurrent:
            fit_buffer_hidden_states(buffer, agent)
    episode_start = np.ones(len(population) * num_envs, dtype=bool)
    collecting = state.collecting()
    while any(collecting):
        with PROFILER.act:
            mask = population[0].prepare_action_mask(info.get("action_mask"))
            fed = states.fed(episode_start)
            (action, log_prob, value), states.current = _act(groups, num_envs, obs, mask, fed)
            env_action = population[0].to_env_action(action)
        with PROFILER.env:
            next_obs, reward, terminated, truncated, info = env.step(env_action)
        if swap_channels:
            next_obs = swap_image_channels(next_obs)
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        reward = np.asarray(reward, dtype=np.float32)
        valid = tracker.step(reward, terminated, truncated)
        # A valid truncation bootstraps from V(final observation) = V(next_obs) here (recurrent:
        # with the state after this step).
        next_values = _values(groups, num_envs, next_obs, states.current) \
            if (valid & truncated & ~terminated).any() else None
        masks = None if mask is None else mask.cpu().numpy()
        hidden = _member_states(groups, fed, len(population))
        full = []
        for slot, (agent, rollout) in enumerate(zip(population, state.rollouts, strict=True)):
            if not collecting[slot]:
                continue
            rows = slice(slot * num_envs, (slot + 1) * num_envs)
            if rollout.append(obs=obs[rows], action=action[rows], reward=reward[rows],
                              terminated=terminated[rows], truncated=truncated[rows], value=value[rows],
                              log_prob=log_prob[rows], valid=valid[rows],
                              final_value=None if next_values is None else next_values[rows],
                              action_mask=None if masks is None else masks[rows], hidden=hidden[slot],
                              episode_start=episode_start[rows].copy() if agent.recurrent else None):
                full.append(slot)
            agent.steps += num_envs
        episode_start = ~valid  # the row after an autoreset row begins an episode
        if full:
            bootstrap = next_values if all(s is None for s in states.current) else None
            _learn(groups, state, full, next_obs, bootstrap, states.fed(episode_start), tracker.autoreset, num_envs)
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
           next_states: list[HiddenStates | None], autoreset: np.ndarray, num_envs: int) -> None:
    """Advantages of the agents whose rollout just filled up (bootstrapping from ``V(next_obs)``
    under the policy that collected it, recurrent groups with the state they will feed next, as
    ``collect_rollouts`` does), then one update per group."""
    with PROFILER.learn:
        if next_values is None:
            next_values = _values(groups, num_envs, next_obs, next_states)
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


def evaluate_batched(population: list[PPO], env: VectorEnv, *, loop: int, max_steps: int | None,
                     swap_channels: bool) -> list[float]:
    """Greedy fitness of every agent at once in the population env (appended to ``fitness``), as
    ``PPO.test`` scores one agent: its mode action, the step info's ``action_mask`` respected, a
    recurrent policy starting each round from a zero state."""
    num_envs = env.num_envs // len(population)
    groups = make_groups(population)
    states = _States(groups, num_envs)

    def greedy(index: int, group: MemberGroup, inputs: Any, masks: torch.Tensor | None) -> Outputs:
        step = group.algorithm.act_population(group, inputs, None, masks, training=False, values=False,
                                              hidden_state=states.current[index])
        states.current[index] = step.hidden
        return (group.members[0].env_actions(step.action),)

    def act(obs: Any, info: dict[str, Any]) -> np.ndarray:
        mask = population[0].prepare_action_mask(info.get("action_mask"))
        action = _by_group(groups, num_envs, obs, mask, greedy)[0]
        return population[0].to_env_action(action)

    return evaluate_population_batched(population, env, act, loop=loop, max_steps=max_steps,
                                       swap_channels=swap_channels, round_start=states.reset)
