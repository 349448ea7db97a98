"""The population-batched off-policy phase: every agent collects and learns at the same time.

The population steps one vector env with ``agents x num_envs`` sub-envs (agent ``p`` owns the
consecutive slice ``[p * num_envs, (p + 1) * num_envs)``). Agents whose networks stack form a
:class:`~agile_core.algorithms.group.MemberGroup` that acts and learns as one computation through
the algorithm's own population-shaped step (``act_population`` / ``learn_population``); each agent
keeps its own epsilon schedule position, exploration noise, learn step, batch size and
hyperparameters. Transitions of all agents go to the shared replay memory in one call.

The memories (:class:`ReplayMemories`: uniform, prioritized, n-step, or prioritized with an n-step
companion) are used the same way by both phases: every batch is drawn by the memory's
``sample_indices`` with the agent's own ``rng`` (and, for prioritized replay, weighted for its own
annealed :meth:`ReplayMemories.beta`), and the priorities a learning step returns are written back
for the agent's own indices, agent by agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from agile_core.algorithms.group import (
    PopulationBatch,
    make_member_groups,
    member_rows,
)
from agile_core.algorithms.protocols import ResetsActionNoise, has_capability
from agile_core.buffers.population import draw_member_indices
from agile_core.networks.stacked import NotStackableError
from agile_core.training import EpsilonSchedule, LearnCredit, swap_image_channels
from agile_core.training.generations import PhaseResult
from agile_core.training.population import (
    Groups,
    act_groups,
    log_once,
    pad_index_batches,
    record_losses,
    start_population_phase,
)
from agile_core.training.profiling import PROFILER
from agile_offpolicy.buffers import (
    MultiStepReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    beta_schedule,
)

__all__ = ["ReplayMemories", "ReplayPopulationBatch", "can_batch", "collect_and_learn_population", "make_groups",
           "sample_padded"]

BATCHED_MEMORIES = (ReplayBuffer, PrioritizedReplayBuffer, MultiStepReplayBuffer)
"""Memory types the batched phase samples from (exactly these: a subclass may sample its own way)."""

def can_batch(population: Sequence[Any], memory: Any) -> bool:
    """Whether the batched phase supports these agents (each has a population-shaped step and
    ``act_population``) and this memory (uniform, prioritized or n-step replay); says why not once,
    in a warning."""
    if type(memory) not in BATCHED_MEMORIES or not population:
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


@dataclass
class ReplayPopulationBatch(PopulationBatch):
    """Transitions ``[P, rows, ...]`` (:class:`PopulationBatch`) with what extended memories add:
    the rows' ``n_steps`` (an n-step memory), prioritized replay ``importance`` weights, the
    ``n_step`` transitions at the same indices (an n-step companion memory) and each member's own
    sampled ``indices``."""

    n_steps: torch.Tensor | None = None
    importance: torch.Tensor | None = None
    n_step: ReplayPopulationBatch | None = None
    indices: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def of_one(cls, experiences: Sequence[Any], device: torch.device | str,
               n_experiences: Sequence[Any] | None = None) -> ReplayPopulationBatch:
        """One agent's flat batch (a ``ReplayBatch``, ``PrioritizedBatch`` or ``NStepBatch``) and
        its n-step view `n_experiences` as ``P = 1``."""
        batch = cast(ReplayPopulationBatch, super().of_one(experiences, device))
        n_steps = getattr(experiences, "n_steps", None)
        if n_steps is not None:
            batch.n_steps = torch.as_tensor(n_steps, device=device, dtype=torch.float32).reshape(1, -1)
        importance = getattr(experiences, "weights", None)
        if importance is not None:
            batch.importance = torch.as_tensor(importance, device=device, dtype=torch.float32).reshape(1, -1)
        if n_experiences is not None:
            batch.n_step = cls.of_one(n_experiences, device)
        indices = getattr(experiences, "indices", None)
        batch.indices = [] if indices is None else [np.asarray(indices)]
        return batch

    @classmethod
    def of_rows(cls, flat: Sequence[Any], members: int, weights: torch.Tensor) -> ReplayPopulationBatch:
        """A gathered flat batch of member-major rows ``[P * rows, ...]`` laid out ``[P, rows, ...]``
        (with the rows' ``n_steps`` when the batch has them)."""
        batch = cast(ReplayPopulationBatch, super().of_rows(flat, members, weights))
        n_steps = getattr(flat, "n_steps", None)
        if n_steps is not None:
            batch.n_steps = member_rows(n_steps, members).to(torch.float32)
        return batch


@dataclass
class ReplayMemories:
    """The replay memory and, for PER + n-step, its n-step companion: how transitions go in,
    batches come out and priorities go back, for both phases.

    With `n_step_memory`, each step goes to the n-step memory first; the 1-step transitions it
    returns (those whose n-step transitions it stored) go to `memory`, so both hold the same
    transition at every storage index and an n-step batch is read at the sampled indices.
    A prioritized `memory` samples with ``beta`` annealed from the agent's ``beta`` to 1 over
    `max_steps` of that agent (``max_steps`` 0: beta 1), and gets the priorities its learn step
    returns.
    """

    memory: Any
    n_step_memory: MultiStepReplayBuffer | None = None
    max_steps: int = 0

    @property
    def prioritized(self) -> bool:
        """Whether the memory samples by priority."""
        return isinstance(self.memory, PrioritizedReplayBuffer)

    def __len__(self) -> int:
        return len(self.memory)

    def start_episodes(self, num_envs: int | None = None) -> None:
        """Drop n-step windows left open by the previous phase (its episodes do not continue); with
        `num_envs`, keep that many windows (one per sub-environment of the phase's env)."""
        for buffer in (self.memory, self.n_step_memory):
            if isinstance(buffer, MultiStepReplayBuffer):
                buffer.clear_windows(num_envs)

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any,
            valid: np.ndarray) -> None:
        """Store one vector step (rows where `valid`)."""
        if self.n_step_memory is None:
            self.memory.add(obs, action, reward, next_obs, terminated, truncated=truncated, mask=valid)
            return
        transitions = self.n_step_memory.add(obs, action, reward, next_obs, terminated, truncated, mask=valid)
        self.memory.add(*transitions)

    def beta(self, agent: Any) -> float | None:
        """`agent`'s importance exponent now: its ``beta`` annealed to 1 over ``max_steps`` of its
        steps (None without prioritized replay)."""
        return beta_schedule(agent.beta, agent.steps, self.max_steps) if self.prioritized else None

    def sample(self, agent: Any) -> tuple[Any, Any]:
        """`agent`'s next batch, ``memory.sample`` with the agent's ``rng`` (the memory's when it has
        none) and :meth:`beta` (as the memory gives it: 1-step, prioritized or n-step), and the
        n-step transitions at its indices (None without an n-step companion)."""
        rng = agent.rng
        beta = self.beta(agent)
        batch = self.memory.sample(agent.batch_size, rng) if beta is None else \
            self.memory.sample(agent.batch_size, beta=beta, rng=rng)
        return batch, None if self.n_step_memory is None else self.n_step_memory.sample_from_indices(batch.indices)

    def sample_population(self, members: Sequence[Any], active: Sequence[bool],
                          device: torch.device | str) -> ReplayPopulationBatch:
        """One batch per active member, each drawn as :meth:`sample` draws it (the memory's
        ``sample_indices`` with the member's ``rng``, importance weights for its :meth:`beta`),
        gathered in one call and laid out ``[P, max_batch, ...]``; padded rows repeat a valid index
        and carry zero weight. With an n-step companion, the n-step transitions at the same indices
        come as ``batch.n_step``, or as the batch itself when the members do not read the 1-step
        ones (``reads_one_step_transitions``)."""
        member_indices = draw_member_indices(self.memory, members, active)
        draws = [(indices, self.beta(member) if on else None)
                 for indices, member, on in zip(member_indices, members, active, strict=True)]
        padded, weights = pad_index_batches([indices for indices, _ in draws])
        rows, row_weights = padded.reshape(-1), torch.as_tensor(weights, device=device)
        n_step = None if self.n_step_memory is None else \
            ReplayPopulationBatch.of_rows(self.n_step_memory.sample_from_indices(rows), padded.shape[0], row_weights)
        if n_step is not None and not members[0].reads_one_step_transitions:
            batch = n_step
        else:
            flat = ReplayBuffer.sample_from_indices(self.memory, rows) if self.prioritized else \
                self.memory.sample_from_indices(rows)
            batch = ReplayPopulationBatch.of_rows(flat, padded.shape[0], row_weights)
            batch.n_step = n_step
        batch.indices = [indices for indices, _ in draws]
        if self.prioritized:
            importance = np.ones(padded.shape, dtype=np.float32)
            for row, (indices, beta) in enumerate(draws):
                if beta is not None:
                    importance[row, :indices.size] = self.memory.importance_weights(indices, beta)
            batch.importance = torch.as_tensor(importance, device=device)
        return batch

    def write_back(self, indices: Sequence[np.ndarray], results: Sequence[Any]) -> list[Any]:
        """The losses of learn steps' `results` (None stays None); the priorities of ``(losses,
        priorities)`` pairs go to a prioritized memory for each step's sampled `indices`, in one
        update in order (an index two steps sampled takes the later step's priority)."""
        losses = [result[0] if isinstance(result, tuple) else result for result in results]
        pairs = [(idx, result[1]) for idx, result in zip(indices, results, strict=True) if isinstance(result, tuple)]
        if self.prioritized and pairs:
            self.memory.update_priorities(np.concatenate([idx for idx, _ in pairs]),
                                          np.concatenate([np.asarray(priorities).reshape(-1) for _, priorities in pairs]))
        return losses

    def learn(self, agent: Any) -> Any:
        """Sample a batch for `agent`, run its ``learn``, write back priorities; return the losses."""
        batch, n_batch = self.sample(agent)
        out = agent.learn(batch) if n_batch is None else agent.learn(batch, n_experiences=n_batch)
        return self.write_back([batch.indices], [out])[0]

    def states(self) -> dict[str, Any]:
        """The memories' checkpoint states."""
        states = {"replay": self.memory.state_dict()}
        if self.n_step_memory is not None:
            states["n_step"] = self.n_step_memory.state_dict()
        return states

    def load(self, saved: Mapping[str, Any]) -> None:
        """Restore what :meth:`states` saved."""
        if "replay" in saved:
            self.memory.load_state_dict(saved["replay"])
        if self.n_step_memory is not None and "n_step" in saved:
            self.n_step_memory.load_state_dict(saved["n_step"])


def sample_padded(memory: Any, members: Sequence[Any], active: Sequence[bool],
                  device: torch.device | str) -> ReplayPopulationBatch:
    """:meth:`ReplayMemories.sample_population` of `memory` (:class:`ReplayMemories`, or one
    replay buffer): one batch per active member, drawn with the member's own ``rng`` exactly as
    agent-by-agent learning draws it, laid out ``[P, max_batch, ...]``."""
    memories = memory if isinstance(memory, ReplayMemories) else ReplayMemories(memory)
    return memories.sample_population(members, active, device)





def _reset_noise(population: Sequence[Any], num_envs: int, ended: np.ndarray | None = None) -> None:
    """Restart the exploration noise of agents that have a process (DDPG, TD3) as the one-agent
    loop does: all of it at a phase start (`ended` None), else for each agent's ended sub-envs."""
    for slot, agent in enumerate(population):
        if has_capability(agent, ResetsActionNoise):
            agent.reset_action_noise(None if ended is None else ended[slot * num_envs:(slot + 1) * num_envs])


def collect_and_learn_population(population: list[Any], env: VectorEnv, memory: ReplayMemories | ReplayBuffer,
                                 vector_steps: int, schedule: EpsilonSchedule, learning_delay: int,
                                 learn_credit: LearnCredit, swap_channels: bool,
                                 should_stop: Callable[[], bool]) -> list[PhaseResult]:
    """Run the whole population for up to `vector_steps` vector steps from a fresh reset of `env`
    (the population env) with `memory` (:class:`ReplayMemories`, or one uniform replay buffer);
    the batched counterpart of the one-agent phase in ``training.py``, with the same learn-credit
    and warm-up rules per agent. n-step windows are kept per sub-env of `env` during the phase."""
    agents = len(population)
    memories = memory if isinstance(memory, ReplayMemories) else ReplayMemories(memory)
    num_envs, tracker, obs, info = start_population_phase(env, agents, swap_channels)
    memories.start_episodes(agents * num_envs)
    results = [PhaseResult(vector_steps=0) for _ in population]
    groups = make_groups(population)
    noisy = any(has_capability(agent, ResetsActionNoise) for agent in population)
    if noisy:
        _reset_noise(population, num_envs)
    steps = 0
    while steps < vector_steps and not should_stop():
        epsilons = [schedule.value(agent.steps / num_envs) for agent in population]
        with PROFILER.act:
            action = act_groups(groups, obs, epsilons, num_envs, info.get("action_mask"), agents)
        with PROFILER.env:
            next_obs, reward, terminated, truncated, info = env.step(action)
        if swap_channels:
            next_obs = swap_image_channels(next_obs)
        valid = tracker.step(reward, terminated, truncated)
        memories.add(obs, action, reward, next_obs, terminated, truncated, valid)
        if noisy:
            _reset_noise(population, num_envs, np.asarray(terminated) | np.asarray(truncated))
        obs = next_obs
        steps += 1
        _learn(population, groups, memories, learning_delay, learn_credit, num_envs, results)
    memories.start_episodes(num_envs)  # back to one window per sub-env of an agent
    for agent, result, (returns, lengths) in zip(population, results, tracker.pop_finished_by_agent(agents),
                                                 strict=True):
        result.vector_steps = steps
        result.episodic_returns, result.episode_lengths = returns, lengths
        if returns:
            agent.scores.append(float(np.mean(returns)))
    return results


def _learn(population: list[Any], groups: Groups, memories: ReplayMemories,
           learning_delay: int, learn_credit: LearnCredit, num_envs: int, results: list[PhaseResult]) -> None:
    """Account one vector step per agent and run the learning steps it pays for, group by group."""
    updates = []
    for slot, agent in enumerate(population):
        agent.steps += num_envs
        count = learn_credit.pay(slot, num_envs, agent.learn_step)
        ready = len(memories) >= max(agent.batch_size, learning_delay)
        updates.append(count if ready else 0)
    for round_index in range(max(updates)):
        for slots, group in groups:
            active = [updates[slot] > round_index for slot in slots]
            if not any(active):
                continue
            view = group.select(active)  # the members a partial round needs, when they are fewer
            part = active[view.offset:view.offset + len(view)]
            with PROFILER.sample:
                batch = memories.sample_population(view.members, part, group.device)
            with PROFILER.learn:
                outs = group.algorithm.learn_population(view, batch, part)
            losses = memories.write_back(batch.indices, outs)  # members in order: a later one wins a shared index
            for slot, loss in zip(slots[view.offset:view.offset + len(view)], losses, strict=True):
                if loss is not None:
                    record_losses(results[slot].losses, loss)

