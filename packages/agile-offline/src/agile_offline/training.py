"""The offline training loop with evolutionary HPO (``train_offline``).

The population learns from a fixed dataset, loaded once into a replay memory, and never steps an
environment to collect data; the environment only measures fitness. One generation:

1. every agent takes ``evo_steps`` gradient steps, each on a fresh uniform batch of the dataset
   drawn with the agent's own ``rng``; agents whose networks stack take them as one
   population-shaped computation (their algorithm's ``learn_population``), each with its own
   hyperparameters and Adam state;
2. every agent is evaluated greedily in the environment (at once in a widened env when it can);
3. the run stops when every agent reached ``target`` or ``max_steps`` are spent; otherwise the
   population is selected and mutated.

Steps 2-3, reporting, checkpoints, elite saving, Ctrl-C and resuming are core's
:class:`~agile_core.training.generations.GenerationLoop`, shared with the online loops.

Step units: ``max_steps`` and ``evo_steps`` count gradient steps of ONE agent (one batch each);
the last generation takes only what is left of ``max_steps``, so a run ends exactly at it.
The dataset is not part of checkpoints: a resumed run is given the same dataset again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

from agile_core.algorithms.base import EvolvableAlgorithm
from agile_core.algorithms.group import make_member_groups
from agile_core.buffers import ReplayBuffer
from agile_core.buffers.population import sample_population
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy
from agile_core.networks.stacked import NotStackableError
from agile_core.training import as_vector_env, check_next_step_autoreset
from agile_core.training.envs import population_vector_env
from agile_core.training.evolution import evaluate_population
from agile_core.training.generations import GenerationLoop, PhaseResult
from agile_core.training.options import RunOptions, documents_run_options
from agile_core.training.population import Groups, evaluate_groups, log_once, record_losses
from agile_core.training.profiling import PROFILER
from agile_offline.datasets import TransitionData, check_spaces, load_dataset, load_minari

__all__ = ["fill_memory", "run_offline", "train_offline"]

def fill_memory(memory: ReplayBuffer, data: TransitionData) -> None:
    """Store every transition of `data` in `memory` (which must hold them all)."""
    if len(data) > memory.max_size:
        raise ValueError(f"the dataset has {len(data)} transitions but the memory holds only {memory.max_size}; "
                         f"build the ReplayBuffer with max_size >= {len(data)}")
    memory.add(data.observations, data.actions, data.rewards, data.next_observations, data.terminations,
               truncated=data.truncations)


def _dataset(dataset: Any, minari_dataset_id: str | None, remote: bool) -> tuple[TransitionData | None, str]:
    """The dataset the arguments name (None when neither does) and a label for messages."""
    if dataset is not None and minari_dataset_id is not None:
        raise ValueError("give either dataset or minari_dataset_id, not both")
    if remote:
        raise ValueError("remote=True: agile never downloads data at run time; download the dataset with "
                         "`minari download ID` first, then pass minari_dataset_id")
    if minari_dataset_id is not None:
        return load_minari(minari_dataset_id), f"Minari dataset {minari_dataset_id!r}"
    if dataset is None:
        return None, "memory"
    if isinstance(dataset, TransitionData):
        return dataset, "dataset"
    label = str(dataset) if isinstance(dataset, str | Path) else getattr(dataset, "filename", "dataset")
    return load_dataset(dataset), str(label)


def _groups(population: list[Any], batched: bool) -> Groups | None:
    """Learning groups (stacked when `batched`, else one per agent), or None when an agent has no
    population-shaped learning step (then every agent learns through its own ``learn``)."""
    try:
        for agent in population:
            agent.check_population_support()
    except (NotStackableError, AttributeError) as error:
        log_once(f"offline learning agent by agent: {error}")
        return None
    if batched:
        return make_member_groups(population)
    return [([slot], agent.solo_group()) for slot, agent in enumerate(population)]


def _learn_phase(population: list[Any], memory: ReplayBuffer, steps: int, batched: bool,
                 should_stop: Callable[[], bool]) -> list[PhaseResult]:
    """Up to `steps` gradient steps for every agent (stops early once `should_stop()`)."""
    results = [PhaseResult(vector_steps=0) for _ in population]
    groups = _groups(population, batched)
    done = 0
    while done < steps and not should_stop():
        if groups is None:
            for agent, result in zip(population, results, strict=True):
                with PROFILER.learn:
                    record_losses(result.losses, agent.learn(memory.sample(agent.batch_size, agent.rng)))
        else:
            for slots, group in groups:
                active = [True] * len(group)
                with PROFILER.sample:
                    batch, _ = sample_population(memory, group.members, active, group.device)
                with PROFILER.learn:
                    losses = group.algorithm.learn_population(group, batch, active)
                for slot, loss in zip(slots, losses, strict=True):
                    record_losses(results[slot].losses, loss)
        for agent in population:
            agent.steps += 1
        done += 1
    for result in results:
        result.vector_steps = done
    return results


@documents_run_options
def train_offline(
    env: gym.Env | VectorEnv,
    env_name: str,
    algo: str,
    pop: list[Any],
    memory: ReplayBuffer,
    init_hp: dict[str, Any] | None = None,
    mut_p: dict[str, Any] | None = None,
    max_steps: int = 1_000_000,
    evo_steps: int = 10_000,
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
    dataset: Any = None,
    minari_dataset_id: str | None = None,
    remote: bool = False,
    wandb_api_key: str | None = None,
    wandb_kwargs: dict[str, Any] | None = None,
    *,
    resume_from_checkpoint: str | None = None,
    seed: int | None = None,
    csv_path: str | None = None,
    batch_population: bool = True,
) -> tuple[list[Any], list[float]]:
    """Train a population of offline agents (CQN) on a fixed dataset with evolutionary HPO.

    Step counts are gradient steps per agent (the last generation may be shorter to end at
    `max_steps`). A checkpoint does not hold the dataset: resume with the same dataset.

    Args:
        env: Gymnasium env or vector env (next-step autoreset) the agents are evaluated in; its
            spaces must fit the dataset.
        env_name: Environment name (logged).
        algo: Algorithm name (logged).
        pop: The agents; each needs ``learn(batch)`` (or a population-shaped ``learn_population``),
            ``test(env, swap_channels, max_steps, loop)``, ``steps``, ``batch_size`` and ``rng``.
        memory: Replay memory the population samples from (used in place). With `dataset` or
            `minari_dataset_id` the dataset's transitions are added to it first (it must hold
            them); otherwise it must already hold the data.
        dataset: The data: an HDF5 file path, an open ``h5py.File``, a mapping of arrays
            (``observations``, ``actions``, ``rewards``, ``terminations`` and ``truncations`` or
            ``terminals``, ``next_observations``), or a ``TransitionData``.
        minari_dataset_id: Id of a local Minari dataset to learn from instead.
        remote: Download the Minari dataset: not supported (nothing is downloaded at run time);
            True raises ValueError.

    Returns:
        The population after its last evaluation and each agent's fitness from that evaluation.
    """
    options = RunOptions.of_call(locals(), "train_offline")
    vec_env = as_vector_env(env)
    check_next_step_autoreset(vec_env)
    data, source = _dataset(dataset, minari_dataset_id, remote)
    if data is not None:
        check_spaces(data, vec_env.single_observation_space, vec_env.single_action_space, source)
        fill_memory(memory, data)
    return run_offline(vec_env, env_name, algo, pop, options, memory, data=data)


def run_offline(env: gym.Env | VectorEnv, env_name: str, algo: str, pop: list[Any], options: RunOptions,
                memory: ReplayBuffer, *, data: TransitionData | None = None) -> tuple[list[Any], list[float]]:
    """The offline loop on `options`, learning from `memory` (already holding the dataset;
    `data`, when given, is the dataset it was filled from, summarised in the logged config). See
    :func:`train_offline` for the other arguments."""
    if not pop:
        raise ValueError("pop must contain at least one agent")
    vec_env = as_vector_env(env)
    check_next_step_autoreset(vec_env)
    largest_batch = max(int(agent.batch_size) for agent in pop)
    if len(memory) < largest_batch:
        raise ValueError(f"the memory holds {len(memory)} transitions, fewer than a batch ({largest_batch}); "
                         "give train_offline a dataset")
    batch_population, eval_loop, eval_steps = options.batch_population, options.eval_loop, options.eval_steps

    def phase(slot: int, agent: Any, steps: int, should_stop: Callable[[], bool]) -> PhaseResult:
        return _learn_phase([agent], memory, steps, False, should_stop)[0]

    config: dict[str, Any] = {
        "env_name": env_name, "algo": algo, "population_size": len(pop), **options.logged(),
        "dataset_transitions": len(memory), **_dataset_summary(data),
    }
    loop = GenerationLoop.create(pop, vec_env, phase, algo, env_name, options, config=config, trim_last=True)
    eval_env = population_vector_env(vec_env, len(pop)) if batch_population else None

    def learn(agents: list[Any], steps: list[int], should_stop: Callable[[], bool]) -> list[PhaseResult]:
        # Every agent takes the same gradient steps.
        return _learn_phase(agents, memory, max(steps), batch_population, should_stop)

    def evaluate(agents: list[Any]) -> list[float]:
        groups_act = all(isinstance(agent, EvolvableAlgorithm) for agent in agents)
        if eval_env is not None and groups_act and len(agents) * vec_env.num_envs == eval_env.num_envs:
            return evaluate_groups(agents, eval_env, loop=eval_loop, max_steps=eval_steps, swap_channels=False)
        return evaluate_population(agents, vec_env, max_steps=eval_steps, loop=eval_loop)

    # One training step is one gradient step of every agent, whatever the env's width.
    loop.batch_population(learn, evaluate, eval_env if eval_env is not None else vec_env, envs_per_agent=1)
    return loop.train(options.resume_from_checkpoint)


def _dataset_summary(data: TransitionData | None) -> Mapping[str, Any]:
    """Episodes and mean episode return of the dataset (logged with the run's config)."""
    if data is None:
        return {}
    returns = data.episode_returns()
    return {"dataset_episodes": len(returns),
            "dataset_mean_return": float(np.mean(returns)) if returns else None}
