"""The off-policy training loop with evolutionary HPO (``train_off_policy``).

One generation:

1. every agent, in turn, resets the env and collects ``evo_steps`` environment steps (rounded up
   to whole vector steps: ``ceil(evo_steps / num_envs)`` of them) with
   its exploring actions (epsilon-greedy; noisy nets for RainbowDQN) into the population's
   shared replay memory (uniform, prioritized, n-step, or prioritized plus an n-step
   companion), learning from it every ``learn_step`` steps;
2. every agent is evaluated greedily (``agent.test``), appending to its ``fitness``;
3. the run stops when every agent reached ``target`` or ``max_steps`` are spent; otherwise the
   population is selected and mutated, and the next generation starts.

Steps 2-3, reporting, checkpoints, elite saving, Ctrl-C and resuming are the shared
:class:`~agile_core.training.generations.GenerationLoop`; this module writes step 1 (the phase).

Step units: ``max_steps``, ``evo_steps``, ``learning_delay`` and an agent's ``learn_step`` count
environment steps of ONE agent summed over its sub-envs (a vector step of 8 sub-envs is 8 steps).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

from agile_core.algorithms.base import EvolvableAlgorithm
from agile_core.algorithms.protocols import ResetsActionNoise, has_capability
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy
from agile_core.training import (
    EpisodeTracker,
    EpsilonSchedule,
    LearnCredit,
    as_vector_env,
    check_next_step_autoreset,
    swap_image_channels,
)
from agile_core.training.envs import population_vector_env
from agile_core.training.generations import GenerationLoop, PhaseResult
from agile_core.training.options import RunOptions, documents_run_options
from agile_core.training.population import evaluate_groups, record_losses
from agile_core.training.profiling import PROFILER
from agile_offpolicy.buffers import (
    MultiStepReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
)
from agile_offpolicy.population import (
    ReplayMemories,
    can_batch,
    collect_and_learn_population,
)

__all__ = ["run_off_policy", "train_off_policy"]


def _check_memories(pop: Sequence[EvolvableAlgorithm], memory: Any, n_step_memory: Any, num_envs: int) -> None:
    """Refuse combinations that would train silently wrong."""
    if n_step_memory is not None:
        if not isinstance(n_step_memory, MultiStepReplayBuffer):
            raise ValueError(f"n_step_memory must be a MultiStepReplayBuffer, got {type(n_step_memory).__name__}")
        if isinstance(memory, MultiStepReplayBuffer):
            raise ValueError("with n_step_memory, memory must be a 1-step buffer (PrioritizedReplayBuffer)")
        if (n_step_memory.max_size, len(n_step_memory), n_step_memory.ptr) != (memory.max_size, len(memory),
                                                                               memory.ptr):
            raise ValueError("memory and n_step_memory must have the same max_size and start aligned "
                             "(both empty, or restored together)")
    for buffer in (memory, n_step_memory):
        if isinstance(buffer, MultiStepReplayBuffer) and buffer.num_envs != num_envs:
            raise ValueError(f"the n-step buffer has {buffer.num_envs} windows for {num_envs} sub-environments")
    extended = n_step_memory is not None or isinstance(memory, PrioritizedReplayBuffer | MultiStepReplayBuffer)
    if extended:
        unable = sorted({type(agent).__name__ for agent in pop if not agent.supports_per_and_n_step})
        if unable:
            raise ValueError(f"prioritized / n-step replay needs agents that learn from them (RainbowDQN); "
                             f"{', '.join(unable)} cannot")


def _collect_and_learn(agent: Any, env: VectorEnv, memories: ReplayMemories, vector_steps: int,
                       schedule: EpsilonSchedule, learning_delay: int, learn_credit: LearnCredit, slot: int,
                       swap_channels: bool, should_stop: Callable[[], bool]) -> PhaseResult:
    """Run `agent` for up to `vector_steps` vector steps from a fresh reset, adding to and
    learning from `memories` as it goes.

    ``learn_credit`` pays for the learning steps (see :class:`LearnCredit`). Credit earned before
    the memory holds ``max(batch_size, learning_delay)`` transitions is dropped.
    Stops early (between vector steps) once `should_stop()` is true.
    """
    num_envs = env.num_envs
    result = PhaseResult(vector_steps=0)
    tracker = EpisodeTracker(num_envs)
    reset_noise = agent.reset_action_noise if has_capability(agent, ResetsActionNoise) else None  # DDPG, TD3
    with PROFILER.env:
        obs, info = env.reset()
    memories.start_episodes(num_envs)
    if reset_noise is not None:
        reset_noise()
    if swap_channels:
        obs = swap_image_channels(obs)
    while result.vector_steps < vector_steps and not should_stop():
        epsilon = schedule.value(agent.steps / num_envs)
        with PROFILER.act:
            action = agent.get_action(obs, epsilon=epsilon, action_mask=info.get("action_mask"))
        with PROFILER.env:
            next_obs, reward, terminated, truncated, info = env.step(action)
        if swap_channels:
            next_obs = swap_image_channels(next_obs)

        # After next-step autoreset the step only reset the sub-env: no transition to store.
        valid = tracker.step(reward, terminated, truncated)
        memories.add(obs, action, reward, next_obs, terminated, truncated, valid)
        if reset_noise is not None:
            reset_noise(np.asarray(terminated) | np.asarray(truncated))
        obs = next_obs
        agent.steps += num_envs
        result.vector_steps += 1

        updates = learn_credit.pay(slot, num_envs, agent.learn_step)
        if len(memories) >= max(agent.batch_size, learning_delay):
            for _ in range(updates):
                with PROFILER.learn:  # sampling included: one call samples and learns
                    losses = memories.learn(agent)
                record_losses(result.losses, losses)
    result.episodic_returns, result.episode_lengths = tracker.pop_finished()
    if result.episodic_returns:
        agent.scores.append(float(np.mean(result.episodic_returns)))
    return result


@documents_run_options
def train_off_policy(
    env: gym.Env | VectorEnv,
    env_name: str,
    algo: str,
    pop: list[Any],
    memory: ReplayBuffer | PrioritizedReplayBuffer | MultiStepReplayBuffer,
    init_hp: dict[str, Any] | None = None,
    mut_p: dict[str, Any] | None = None,
    max_steps: int = 1_000_000,
    evo_steps: int = 10_000,
    eval_steps: int | None = None,
    eval_loop: int = 1,
    learning_delay: int = 0,
    eps_start: float = 1.0,
    eps_end: float = 0.01,
    eps_decay: float = 0.999,
    target: float | None = None,
    n_step_memory: MultiStepReplayBuffer | None = None,
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
    """Train a population of off-policy agents (DQN, RainbowDQN, DDPG, TD3) with evolutionary HPO.

    Step counts are environment steps per agent (summed over its sub-envs); `evo_steps` is rounded
    up to whole vector steps, and `max_steps` is checked after each generation, so the last may
    pass it (docs/step-budgets.md). A checkpoint also saves the replay memories (n-step windows
    and priorities included); on resuming, unspent learn credit (less than one ``learn_step``)
    restarts at 0. With `batch_population`, the population trains at once when it can (agents
    with a population-shaped learning step, a ``ReplayBuffer``, ``PrioritizedReplayBuffer`` or
    ``MultiStepReplayBuffer`` memory, with or without an n-step companion, and an env that can be
    widened: Gymnasium native vector envs and ``SyncVectorEnv``s of fresh-env factories): one
    vector env with ``len(pop) * num_envs`` sub-envs (agent ``i`` owns the i-th slice), agents
    sharing an architecture acting and learning as one stacked computation, each with its own
    hyperparameters and exploration (see :mod:`agile_offpolicy.population`); otherwise agents
    train one after the other in `env`.

    Args:
        env: Gymnasium env or vector env (next-step autoreset); a plain env runs as one sub-env.
        env_name: Environment name (logged).
        algo: Algorithm name (logged).
        pop: The agents; each needs ``get_action(obs, epsilon, action_mask)``, ``learn(batch)``,
            ``test(env, swap_channels, max_steps, loop)``, ``steps``, ``batch_size``, ``learn_step``.
        memory: Replay memory shared by the population (used in place, not copied): every agent
            adds its transitions and samples batches from everyone's, as off-policy learning
            allows. Sharing gives each agent the population's data diversity, keeps one memory
            per run (not per agent) and survives selection unchanged. Batches are drawn with the
            agent's own ``rng`` (saved in checkpoints) when it has one, else with the memory's.
            A ``PrioritizedReplayBuffer`` samples with the agent's ``beta`` annealed linearly to 1
            over `max_steps` (of that agent) and takes the new priorities each learn step
            returns; a ``MultiStepReplayBuffer`` alone gives n-step batches. Both need agents
            that learn from them (``supports_per_and_n_step``: RainbowDQN). With
            ``init_hp["CHANNELS_LAST"]`` it stores channels-first observations.
        learning_delay: An agent learns only once its memory holds this many transitions
            (and at least ``batch_size``).
        eps_start: Initial exploration rate.
        eps_end: Final exploration rate.
        eps_decay: Multiplicative epsilon decay per vector step of an agent; epsilon is a
            function of the agent's own ``steps``, so a clone continues its parent's schedule.
        n_step_memory: A ``MultiStepReplayBuffer`` used alongside a 1-step `memory` (usually
            prioritized), same ``max_size``, both empty (or restored together): each step goes
            into it, the 1-step transitions it returns go into `memory`, so both share storage
            indices; every batch of `memory` is paired with the n-step transitions at the same
            indices (``agent.learn(batch, n_experiences=...)``).

    Returns:
        The population after its last evaluation and each agent's fitness from that evaluation
        (``fitnesses[i]`` belongs to ``pop[i]``); no selection or mutation follows the last
        evaluation.
    """
    options = RunOptions.of_call(locals(), "train_off_policy")
    return run_off_policy(env, env_name, algo, pop, options, memory, n_step_memory=n_step_memory,
                          learning_delay=learning_delay, schedule=EpsilonSchedule(eps_start, eps_end, eps_decay))


def run_off_policy(env: gym.Env | VectorEnv, env_name: str, algo: str, pop: list[Any], options: RunOptions,
                   memory: ReplayBuffer | PrioritizedReplayBuffer | MultiStepReplayBuffer, *,
                   n_step_memory: MultiStepReplayBuffer | None = None, learning_delay: int = 0,
                   schedule: EpsilonSchedule | None = None) -> tuple[list[Any], list[float]]:
    """The off-policy loop on `options` (see :func:`train_off_policy` for the other arguments;
    `schedule` defaults to ``EpsilonSchedule()``, the seed's epsilon defaults)."""
    if not pop:
        raise ValueError("pop must contain at least one agent")
    if learning_delay < 0:
        raise ValueError(f"learning_delay must be >= 0, got {learning_delay}")
    schedule = schedule or EpsilonSchedule()
    swap_channels = options.swap_channels
    eval_loop, eval_steps = options.eval_loop, options.eval_steps

    vec_env = as_vector_env(env)
    check_next_step_autoreset(vec_env)
    num_envs = int(vec_env.num_envs)
    _check_memories(pop, memory, n_step_memory, num_envs)
    memories = ReplayMemories(memory, n_step_memory, options.max_steps)
    learn_credit = LearnCredit(len(pop))

    def phase(slot: int, agent: Any, vector_steps: int, should_stop: Callable[[], bool]) -> PhaseResult:
        return _collect_and_learn(agent, vec_env, memories, vector_steps, schedule, learning_delay,
                                  learn_credit, slot, swap_channels, should_stop)

    config = {"env_name": env_name, "algo": algo, "population_size": len(pop), "num_envs": num_envs,
              **options.logged(), "learning_delay": learning_delay, "eps_start": schedule.start,
              "eps_end": schedule.end, "eps_decay": schedule.decay}
    loop = GenerationLoop.create(
        pop, vec_env, phase, algo, env_name, options, config=config, swap_channels=swap_channels,
        buffers=lambda: {**memories.states(), "learn_credit": learn_credit.state_dict()})
    population_env = population_vector_env(vec_env, len(pop)) \
        if options.batch_population and can_batch(pop, memory) else None
    if population_env is not None:
        def population_phase(agents: list[Any], vector_steps: list[int],
                             should_stop: Callable[[], bool]) -> list[PhaseResult]:
            # The population steps in lockstep: the same vector steps for every agent.
            return collect_and_learn_population(agents, population_env, memories, max(vector_steps), schedule,
                                                learning_delay, learn_credit, swap_channels, should_stop)

        def population_evaluate(agents: list[Any]) -> list[float]:
            return evaluate_groups(agents, population_env, loop=eval_loop, max_steps=eval_steps,
                                    swap_channels=swap_channels)

        loop.batch_population(population_phase, population_evaluate, population_env, num_envs)

    def load_buffers(saved: Mapping[str, Any]) -> None:
        memories.load(saved)
        if "learn_credit" in saved:  # older checkpoints start every slot without credit
            learn_credit.load_state_dict(saved["learn_credit"])

    return loop.train(options.resume_from_checkpoint, load_buffers=load_buffers)
