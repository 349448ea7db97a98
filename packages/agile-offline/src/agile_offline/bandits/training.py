"""The contextual-bandit training loop with evolutionary HPO (``train_bandits``).

One generation (core's :class:`~agile_core.training.generations.GenerationLoop`):

1. every agent takes ``evo_steps`` bandit steps: it scores each arm's context, pulls one (its
   exploration: UCB bonus or Thompson sample), stores (context of the pulled arm, reward) in its
   OWN memory and, every ``learn_step`` steps once the memory holds ``batch_size`` pairs, takes
   one regression step on a batch sampled from it. With ``batch_population`` the population
   answers the same rows together, agents whose networks stack acting and learning as one
   ``[P, ...]`` computation (:func:`make_member_groups`);
2. every agent is evaluated greedily (``argmax f``): fitness = mean reward over ``eval_steps``
   rows (default 200) times ``eval_loop``;
3. selection and mutation; a clone takes a copy of its parent's memory.

Logged per generation (``train/...``, averaged over the agents): ``regret`` (the regret an agent
accumulated in the phase), ``mean_reward`` (its mean reward there) and ``loss`` (regression
loss); ``train/episodic_return`` is the summed reward of ``episode_steps``-step "episodes".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from agile_core.algorithms.group import MemberGroup, make_member_groups
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy
from agile_core.training.arguments import positive_int
from agile_core.training.evolution import EvolutionResult
from agile_core.training.generations import GenerationLoop, PhaseResult
from agile_core.training.options import RunOptions, documents_run_options
from agile_core.training.profiling import PROFILER
from agile_offline.bandits.base import DEFAULT_EVAL_STEPS, BanditBatch
from agile_offline.bandits.memory import BanditMemory

__all__ = ["run_bandits", "train_bandits"]


class _Run:
    """Per-agent state of a run, keyed by agent index: memories, learn credit, open episodes."""

    def __init__(self, template: BanditMemory, episode_steps: int) -> None:
        self.template = template
        self.episode_steps = episode_steps
        self.memories: dict[int, BanditMemory] = {}
        self.credit: dict[int, int] = {}
        self.episode: dict[int, list[float]] = {}  # index -> [return so far, length so far]

    def memory(self, agent: Any) -> BanditMemory:
        if agent.index not in self.memories:
            self.memories[agent.index] = self.template.empty_like()
        return self.memories[agent.index]

    def record(self, agent: Any, context: np.ndarray, reward: float, regret: float, result: PhaseResult) -> int:
        """Store a step of `agent`; return how many learning steps are due."""
        self.memory(agent).add(context, reward)
        agent.steps += 1
        agent.cumulative_regret += regret
        result.losses.setdefault("regret", [0.0])[0] += regret
        result.losses.setdefault("mean_reward", [0.0])[0] += reward
        episode = self.episode.setdefault(agent.index, [0.0, 0])
        episode[0] += reward
        episode[1] += 1
        if episode[1] >= self.episode_steps:
            result.episodic_returns.append(float(episode[0]))
            result.episode_lengths.append(int(episode[1]))
            self.episode[agent.index] = [0.0, 0]
        updates, self.credit[agent.index] = divmod(self.credit.get(agent.index, 0) + 1, agent.learn_step)
        return updates if len(self.memory(agent)) >= agent.batch_size else 0

    def finish(self, agents: list[Any], results: list[PhaseResult]) -> list[PhaseResult]:
        for agent, result in zip(agents, results, strict=True):
            if result.vector_steps and "mean_reward" in result.losses:
                result.losses["mean_reward"][0] /= result.vector_steps
                agent.phase_regret = float(result.losses["regret"][0])
            if result.episodic_returns:
                agent.scores.append(float(np.mean(result.episodic_returns)))
        return results

    def evolved(self, evolution: EvolutionResult) -> None:
        """Clones take a copy of their parent's memory; agents that left drop theirs."""
        for child, parent in evolution.parents.items():
            if parent in self.memories:
                self.memories[child] = self.memories[parent].copy()
                self.credit[child] = 0
                self.episode[child] = [0.0, 0]
        alive = {agent.index for agent in evolution.population}
        for table in (self.memories, self.credit, self.episode):
            for index in [i for i in table if i not in alive]:
                del table[index]

    def states(self, population: list[Any]) -> dict[str, Any]:
        return {f"slot_{slot}": self.memory(agent).state_dict() for slot, agent in enumerate(population)}

    def load(self, population: list[Any], saved: Mapping[str, Any]) -> None:
        self.memories.clear()
        for slot, agent in enumerate(population):
            state = saved.get(f"slot_{slot}")
            if state is not None:
                self.memory(agent).load_state_dict({k: _plain(v) for k, v in state.items()})


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.item() if value.dim() == 0 else value.cpu().numpy()
    return value


def _batch(agents: list[Any], memories: list[BanditMemory], active: list[bool], device: Any) -> BanditBatch:
    """Each active agent's sample of its own memory, padded to ``[P, max batch, D]``."""
    rows = max(agent.batch_size for agent, on in zip(agents, active, strict=True) if on)
    dim = memories[0].dim
    contexts = np.zeros((len(agents), rows, dim), dtype=np.float32)
    rewards = np.zeros((len(agents), rows), dtype=np.float32)
    weights = np.zeros((len(agents), rows), dtype=np.float32)
    for p, (agent, memory, on) in enumerate(zip(agents, memories, active, strict=True)):
        if on:
            x, r = memory.sample(agent.rng, agent.batch_size)
            contexts[p, :agent.batch_size], rewards[p, :agent.batch_size] = x, r
            weights[p, :agent.batch_size] = 1.0 / agent.batch_size
    to = torch.as_tensor
    return BanditBatch(to(contexts, device=device), to(rewards, device=device), to(weights, device=device))


def _learn_group(group: MemberGroup, agents: list[Any], memories: list[BanditMemory], updates: list[int],
                 results: list[PhaseResult]) -> None:
    """``max(updates)`` rounds of the group's learning step, each member active for its own count."""
    for round_ in range(max(updates, default=0)):
        active = [count > round_ for count in updates]
        with PROFILER.learn:
            losses = group.algorithm.learn_population(group, _batch(agents, memories, active, group.device), active)
        for result, loss in zip(results, losses, strict=True):
            if loss is not None:
                result.losses.setdefault("loss", []).append(float(loss))


def _phase(agent: Any, env: Any, run: _Run, vector_steps: int, should_stop: Callable[[], bool]) -> PhaseResult:
    """One agent alone for up to `vector_steps` bandit steps (the unbatched loop)."""
    result = PhaseResult(vector_steps=0)
    contexts, _ = env.reset()
    while result.vector_steps < vector_steps and not should_stop():
        arm = agent.get_action(contexts, training=True)
        next_contexts, reward, regret, _ = env.step(arm)
        updates = run.record(agent, contexts[arm], float(reward), float(regret), result)
        result.vector_steps += 1
        contexts = next_contexts
        memory = run.memory(agent)
        for _ in range(updates):
            with PROFILER.learn:
                loss = agent.learn(*memory.sample(agent.rng, agent.batch_size))
            result.losses.setdefault("loss", []).append(loss)
    return run.finish([agent], [result])[0]


def _population_phase(agents: list[Any], env: Any, run: _Run, vector_steps: int,
                      should_stop: Callable[[], bool]) -> list[PhaseResult]:
    """The whole population answers the same rows; groups act and learn as stacked computations."""
    results = [PhaseResult(vector_steps=0) for _ in agents]
    groups = make_member_groups(agents)
    contexts, _ = env.reset()
    taken = 0
    while taken < vector_steps and not should_stop():
        arms = np.zeros(len(agents), dtype=np.int64)
        for slots, group in groups:
            inputs = torch.as_tensor(contexts, device=group.device).unsqueeze(0).expand(len(slots), -1, -1)
            arms[slots] = group.algorithm.act_population(group, inputs, True)
        next_contexts, rewards, regrets, _ = env.step(arms)
        updates = [run.record(agent, contexts[arms[slot]], float(rewards[slot]), float(regrets[slot]), results[slot])
                   for slot, agent in enumerate(agents)]
        taken += 1
        for result in results:
            result.vector_steps = taken
        for slots, group in groups:
            _learn_group(group, [agents[s] for s in slots], [run.memory(agents[s]) for s in slots],
                         [updates[s] for s in slots], [results[s] for s in slots])
        contexts = next_contexts
    return run.finish(agents, results)


def _evaluate_population(agents: list[Any], env: Any, steps: int) -> list[float]:
    """Greedy fitness of every agent on the same `steps` rows (one stacked forward per group)."""
    groups = make_member_groups(agents)
    totals = np.zeros(len(agents))
    contexts, _ = env.reset()
    for _ in range(steps):
        arms = np.zeros(len(agents), dtype=np.int64)
        for slots, group in groups:
            inputs = torch.as_tensor(contexts, device=group.device).unsqueeze(0).expand(len(slots), -1, -1)
            arms[slots] = group.algorithm.act_population(group, inputs, False)
        contexts, rewards, _, _ = env.step(arms)
        totals += rewards
    fitnesses = [float(total / steps) for total in totals]
    for agent, fitness in zip(agents, fitnesses, strict=True):
        agent.fitness.append(fitness)
    return fitnesses


@documents_run_options
def train_bandits(
    env: Any,
    env_name: str,
    algo: str,
    pop: list[Any],
    memory: BanditMemory | None = None,
    init_hp: dict[str, Any] | None = None,
    mut_p: dict[str, Any] | None = None,
    max_steps: int = 10_000,
    episode_steps: int = 500,
    evo_steps: int = 500,
    eval_steps: int | None = None,
    eval_loop: int = 1,
    target: float | None = None,
    selection_strategy: SelectionStrategy | None = None,
    tournament: SelectionStrategy | None = None,
    mutation: Mutations | None = None,
    checkpoint: int | None = None,
    checkpoint_path: str | None = None,
    overwrite_checkpoints: bool = False,
    save_elite: bool = False,
    elite_path: str | None = None,
    wb: bool = False,
    tensorboard: bool = False,
    tensorboard_log_dir: str | None = None,
    verbose: bool = True,
    accelerator: Any = None,
    wandb_api_key: str | None = None,
    wandb_kwargs: dict[str, Any] | None = None,
    *,
    resume_from_checkpoint: str | None = None,
    seed: int | None = None,
    csv_path: str | None = None,
    batch_population: bool = True,
) -> tuple[list[Any], list[float]]:
    """Train a population of neural bandits (NeuralUCB, NeuralTS) on a :class:`BanditEnv`.

    Step counts are bandit steps per agent. An evaluation answers ``eval_steps * eval_loop`` rows
    greedily (`eval_steps` default 200); fitness, which `target` compares with, is the mean greedy
    reward (in [0, 1]). A checkpoint holds the agents with their covariance, memories and RNGs.

    Args:
        env: A ``BanditEnv`` (or any env with its API: ``reset(seed)``, ``step(arm or arms)``
            returning ``(contexts, reward, regret, info)``).
        env_name: Environment name (logged).
        algo: Algorithm name (logged).
        pop: The agents (``NeuralBandit`` subclasses).
        memory: A ``BanditMemory`` whose capacity and width every agent's own memory copies
            (it is not filled itself); None: capacity `max_steps`, the env's context width.
        episode_steps: Bandit steps per logged "episode" (its return: the summed reward).

    Returns:
        The population after its last evaluation and each agent's last fitness.
    """
    options = RunOptions.of_call(locals(), "train_bandits")
    return run_bandits(env, env_name, algo, pop, options, memory, episode_steps=episode_steps)


def run_bandits(env: Any, env_name: str, algo: str, pop: list[Any], options: RunOptions,
                memory: BanditMemory | None = None, *, episode_steps: int = 500) -> tuple[list[Any], list[float]]:
    """The bandit loop on `options` (see :func:`train_bandits` for the other arguments; an
    evaluation is ``eval_steps`` rows, default 200, times ``eval_loop``)."""
    if not pop:
        raise ValueError("pop must contain at least one agent")
    episode_steps = positive_int("episode_steps", episode_steps)
    eval_rows = options.eval_steps if options.eval_steps is not None else DEFAULT_EVAL_STEPS
    options = replace(options, eval_steps=eval_rows)
    dim = int(env.single_observation_space.shape[0])
    template = memory if memory is not None else BanditMemory(options.max_steps, dim)
    if template.dim != dim:
        raise ValueError(f"memory holds contexts of {template.dim} values, the env's are {dim}")
    run = _Run(template, episode_steps)

    def phase(slot: int, agent: Any, vector_steps: int, should_stop: Callable[[], bool]) -> PhaseResult:
        return _phase(agent, env, run, vector_steps, should_stop)

    config = {"env_name": env_name, "algo": algo, "population_size": len(pop), **options.logged(),
              "episode_steps": episode_steps}
    # The last generation takes only what is left of max_steps (the memory holds max_steps pairs).
    loop = GenerationLoop.create(pop, env, phase, algo, env_name, options, config=config,
                                 buffers=lambda: run.states(loop.population), trim_last=True)
    loop.on_evolved = run.evolved
    if options.batch_population:
        def population_phase(agents: list[Any], vector_steps: list[int],
                             should_stop: Callable[[], bool]) -> list[PhaseResult]:
            # Every agent answers the same rows: the same bandit steps for all.
            return _population_phase(agents, env, run, max(vector_steps), should_stop)

        def population_evaluate(agents: list[Any]) -> list[float]:
            return _evaluate_population(agents, env, eval_rows * options.eval_loop)

        loop.batch_population(population_phase, population_evaluate, env, 1)
    return loop.train(options.resume_from_checkpoint, load_buffers=lambda saved: run.load(loop.population, saved))
