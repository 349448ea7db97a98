"""The multi-agent off-policy loop with evolutionary HPO (``train_multi_agent_off_policy``).

One generation: the whole population steps one widened vector env (member ``p`` owns its own
``num_envs`` sub-envs), acting with exploration through each algorithm's population-shaped rule;
every joint transition goes into the shared replay memory (a dead agent's entries masked), and
each member learns from it every ``learn_step`` of its own environment steps, members whose
networks stack as one computation. Then every member is evaluated greedily, and the shared
:class:`~agile_core.training.generations.GenerationLoop` selects, mutates, checkpoints and logs.

Step units as in the single-agent loops: ``max_steps``, ``evo_steps``, ``learning_delay`` and
``learn_step`` count one member's environment steps summed over its sub-envs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from agile_core.algorithms.protocols import ResetsActionNoise, has_capability
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy
from agile_core.training import LearnCredit
from agile_core.training.generations import GenerationLoop, PhaseResult
from agile_core.training.options import RunOptions, documents_run_options
from agile_core.training.profiling import PROFILER
from agile_marl.population import act_groups
from agile_marl.training.common import (
    PopulationRun,
    check_population,
    no_agent_phase,
    population_env,
    record_losses,
    run_generations,
)

__all__ = ["run_multi_agent_off_policy", "train_multi_agent_off_policy"]


def _reset_noise(population: list[Any], num_envs: int, ended: np.ndarray | None = None) -> None:
    """Restart the exploration noise of every member's sub-envs whose episode ended (all when None)."""
    for slot, agent in enumerate(population):
        if has_capability(agent, ResetsActionNoise):
            agent.reset_action_noise(None if ended is None else ended[slot * num_envs:(slot + 1) * num_envs])


def _learn(population: list[Any], run: PopulationRun, memory: Any, learning_delay: int, learn_credit: LearnCredit,
           results: list[PhaseResult]) -> None:
    """Account one vector step per member and run the learning steps it pays for, group by group."""
    updates = []
    for slot, agent in enumerate(population):
        agent.steps += run.num_envs
        count = learn_credit.pay(slot, run.num_envs, agent.learn_step)
        updates.append(count if len(memory) >= max(agent.batch_size, learning_delay) else 0)
    assert run.groups is not None
    for round_index in range(max(updates)):
        for slots, group in run.groups:
            active = [updates[slot] > round_index for slot in slots]
            if not any(active):
                continue
            with PROFILER.sample:
                batch = memory.sample_population(group.members, active)
            with PROFILER.learn:
                losses = group.algorithm.learn_population(group, batch, active)
            for slot, loss in zip(slots, losses, strict=True):
                record_losses(results[slot].losses, loss)


def _phase(population: list[Any], run: PopulationRun, memory: Any, vector_steps: int, learning_delay: int,
           learn_credit: LearnCredit, should_stop: Callable[[], bool]) -> list[PhaseResult]:
    members = len(population)
    run.groups_for(population)
    assert run.groups is not None
    results = [PhaseResult(vector_steps=0) for _ in population]
    with PROFILER.env:
        obs, info = run.start()
    _reset_noise(population, run.num_envs)
    steps = 0
    while steps < vector_steps and not should_stop():
        with PROFILER.act:
            actions, _ = act_groups(run.groups, obs, members, training=True, action_masks=info.get("action_mask"))
        with PROFILER.env:
            next_obs, rewards, terminations, _, info = run.env.step(actions)
        run.account(rewards, info)
        memory.add(obs, actions, rewards, next_obs, terminations, info["valid"])
        _reset_noise(population, run.num_envs, np.asarray(info["episode_over"], dtype=bool))
        obs = next_obs
        steps += 1
        _learn(population, run, memory, learning_delay, learn_credit, results)
    return run.finish(population, results, [steps] * members)


@documents_run_options
def train_multi_agent_off_policy(
    env: Any,
    env_name: str,
    algo: str,
    pop: list[Any],
    memory: Any,
    sum_scores: bool = True,
    init_hp: dict[str, Any] | None = None,
    mut_p: dict[str, Any] | None = None,
    max_steps: int = 50000,
    evo_steps: int = 25,
    eval_steps: int | None = None,
    eval_loop: int = 1,
    learning_delay: int = 0,
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
) -> tuple[list[Any], list[float] | list[dict[str, float]]]:
    """Train a population of multi-agent off-policy agents (MADDPG, MATD3) with evolutionary HPO.

    Step counts are environment steps per member; `evo_steps` is rounded up to whole vector steps,
    and `max_steps` is checked after each generation, so the last may pass it (docs/step-budgets.md).

    Args:
        env: A PettingZoo ``ParallelEnv`` (one sub-env) or an ``agile_marl.envs`` vector env
            (``PettingZooVecEnv``/``AsyncPettingZooVecEnv``); widened to one slice of sub-envs per member.
        env_name: Environment name (logged).
        algo: Algorithm name (logged).
        pop: The agents (``MADDPG``/``MATD3``, or any algorithm with the multi-agent
            population-shaped ``act_population``/``learn_population``).
        memory: ``MultiAgentReplayBuffer`` shared by the population (used in place): every member
            adds its joint transitions and samples batches from everyone's with its own ``rng``.
        sum_scores: Fitness is the sum of the agents' returns (True, cooperative tasks); when
            False each member's per-agent mean returns are kept too, and returned as dicts.
            Selection always ranks by the sum.
        learning_delay: A member learns only once the memory holds this many transitions.

    Returns:
        The population after its last evaluation and each member's fitness from it (dicts of
        per-agent fitness when `sum_scores` is false).
    """
    options = RunOptions.of_call(locals(), "train_multi_agent_off_policy")
    return run_multi_agent_off_policy(env, env_name, algo, pop, options, memory, learning_delay=learning_delay,
                                      sum_scores=sum_scores)


def run_multi_agent_off_policy(env: Any, env_name: str, algo: str, pop: list[Any], options: RunOptions, memory: Any,
                               *, learning_delay: int = 0, sum_scores: bool = True,
                               ) -> tuple[list[Any], list[float] | list[dict[str, float]]]:
    """The multi-agent off-policy loop on `options` (see :func:`train_multi_agent_off_policy`
    for the other arguments)."""
    check_population(pop)
    if isinstance(learning_delay, bool) or not isinstance(learning_delay, int) or learning_delay < 0:
        raise ValueError(f"learning_delay must be an integer >= 0, got {learning_delay!r}")
    widened = population_env(env, len(pop))
    run = PopulationRun(widened, widened.num_envs // len(pop), batched=options.batch_population)
    learn_credit = LearnCredit(len(pop))

    def phase(population: list[Any], vector_steps: list[int], should_stop: Callable[[], bool]) -> list[PhaseResult]:
        # Members step in lockstep: the same vector steps for all.
        return _phase(population, run, memory, max(vector_steps), learning_delay, learn_credit, should_stop)

    config = {"env_name": env_name, "algo": algo, "population_size": len(pop), "num_envs": run.num_envs,
              **options.logged(), "learning_delay": learning_delay, "sum_scores": sum_scores}
    loop = GenerationLoop.create(
        pop, widened, no_agent_phase, algo, env_name, options, config=config,
        buffers=lambda: {"replay": memory.state_dict(), "learn_credit": learn_credit.state_dict()})

    def load_buffers(saved: Any) -> None:
        # The memory and each slot's steps not yet paid for by a learning step (a run resumed
        # mid-`learn_step` learns at the same steps as an uninterrupted one).
        if "replay" in saved:
            memory.load_state_dict(saved["replay"])
        learn_credit.load_state_dict(saved["learn_credit"])

    return run_generations(loop, run, phase, options, sum_scores=sum_scores, load_buffers=load_buffers)
