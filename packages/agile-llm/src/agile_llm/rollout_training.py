"""`train_llm_rollout`: evolve a population of rollout learners (GRPO, LLMPPO, LLMREINFORCE) on
rollout (text) environments.

Built on core's :class:`~agile_core.training.generations.GenerationLoop` (reporting, periodic
and Ctrl-C checkpoints, elite saving, resume). One training step is one learning step of every
member: ``batch_size`` prompts drawn with the member's generator, ``group_size`` sampled episodes
each, then the algorithm's update. A generation is ``evo_steps`` steps (else ``evaluation_interval``)
and ends with every member's ``test``: greedy episodes on the held-out prompts (fitness: mean
return), then selection and mutation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy
from agile_core.training.arguments import positive_int
from agile_core.training.generations import GenerationLoop, PhaseResult
from agile_core.training.options import RunOptions, documents_run_options
from agile_core.training.population import record_losses
from agile_core.training.profiling import PROFILER
from agile_llm.rollout import Episode, RolloutHarness
from agile_llm.rollout_learner import RolloutLearner
from agile_llm.training import check_resume_base, warn_unusable_mutations

__all__ = ["CompletionLoggingConfig", "RolloutSettings", "run_llm_rollout", "train_llm_rollout"]


@dataclass
class CompletionLoggingConfig:
    """Samples of evaluation episodes (prompt, completions, reward) written after every
    ``interval``-th evaluation: to ``jsonl_path`` (one JSON object a line) and, when verbose,
    to the console."""

    jsonl_path: str | None = None
    """JSONL file the samples are appended to (None: console only)."""
    num_samples: int = 2
    """Episodes sampled per member."""
    interval: int = 1
    """Write every this many evaluations."""


@dataclass(frozen=True)
class RolloutSettings:
    """What the rollout loop takes beyond the options every loop shares."""

    max_turns: int
    """Policy turns per episode at most (overrides the harness's ``max_turns``)."""
    max_reward: float | None = None
    """Return counted as solved (the ``accuracy`` written with the completion samples)."""
    io_timeout_s: float | None = 600.0
    """Deadline of every environment call (None: none)."""
    max_wall_seconds: float | None = None
    """Stop at the end of the generation in which this much wall time passed."""
    completion_logging: CompletionLoggingConfig | None = None
    """Samples of evaluation episodes to write (None: none)."""
    eval_episodes: int | None = None
    """Greedy evaluation episodes per member per evaluation pass (None: the environment's
    ``num_test``, else 1)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_turns", positive_int("max_turns", self.max_turns))
        if self.eval_episodes is not None:
            object.__setattr__(self, "eval_episodes", positive_int("eval_episodes", self.eval_episodes))


class _Source:
    """The loop's "environment": reseeds torch's generator (rollout sampling) at the fixed
    points core's loop chooses, so a resumed run samples like an uninterrupted one."""

    num_envs = 1

    def __init__(self, name: str) -> None:
        self.name = name

    def reset(self, seed: int | None = None, **_: Any) -> None:
        if seed is not None:
            import torch

            torch.manual_seed(int(seed))


@documents_run_options
def train_llm_rollout(
    pop: list[Any],
    max_turns: int,
    env_factory: Callable[[], RolloutHarness],
    init_hp: dict[str, Any] | None = None,
    max_steps: int = 32768,
    save_elite: bool | None = None,
    elite_path: str | None = None,
    wb: bool = False,
    tensorboard: bool = False,
    tensorboard_log_dir: str | None = None,
    csv: bool = False,
    csv_log_dir: str | None = None,
    evo_steps: int | None = None,
    checkpoint_steps: int | None = None,
    checkpoint_path: str | None = None,
    selection_strategy: SelectionStrategy | None = None,
    tournament: SelectionStrategy | None = None,
    mutation: Mutations | None = None,
    wandb_api_key: str | None = None,
    wandb_kwargs: dict[str, Any] | None = None,
    evaluation_interval: int = 50,
    eval_loop: int = 1,
    max_reward: float | None = None,
    verbose: bool = True,
    max_wall_seconds: float | None = None,
    io_timeout_s: float | None = 600.0,
    completion_logging: CompletionLoggingConfig | Mapping[str, Any] | None = None,
    *,
    resume_from_checkpoint: str | None = None,
    overwrite_checkpoints: bool = False,
    target: float | None = None,
    seed: int | None = None,
    mut_p: dict[str, Any] | None = None,
    env_name: str = "rollout",
    accelerator: Any = None,
    eval_episodes: int | None = None,
) -> tuple[list[Any], list[float]]:
    """Train a population of rollout agents (GRPO, LLMPPO or LLMREINFORCE) on episodes from
    `env_factory`.

    Step counts are learning steps per member; `evo_steps` is then also the evaluation interval,
    and `eval_loop` greedy passes are averaged into the fitness (1 is normally enough). A resume on
    another base model is refused; `seed` seeds torch's generator (rollout sampling) at fixed
    points; `verbose` also prints completion samples.

    Args:
        pop: Agents of one rollout algorithm, normally sharing one base model.
        max_turns: Policy turns per episode at most (overrides the harness's ``max_turns``).
        env_factory: Zero-argument factory of a fresh :class:`RolloutHarness` (one per episode).
        csv, csv_log_dir: Write every metric to a CSV file (default ``llm_rollout_metrics.csv``).
        evaluation_interval: Learning steps between evaluations when `evo_steps` is None.
        max_reward: Return counted as solved: the share of evaluation episodes reaching it is
            written with the completion samples (``accuracy``).
        max_wall_seconds: Stop at the end of the generation in which this much wall time passed.
        io_timeout_s: Deadline of every environment call (set on each harness; None: none).
        completion_logging: :class:`CompletionLoggingConfig` (or its fields as a dict).
        env_name: Label of the run.
        eval_episodes: Greedy episodes of each evaluation pass (seeds 0, 1, ... on the test
            split); None: the text environment's ``num_test`` attribute, else 1.

    Returns:
        The population after its last evaluation and each member's fitness from it.
    """
    settings = RolloutSettings(
        max_turns=max_turns, max_reward=max_reward, io_timeout_s=io_timeout_s, max_wall_seconds=max_wall_seconds,
        completion_logging=(CompletionLoggingConfig(**completion_logging) if isinstance(completion_logging, Mapping)
                            else completion_logging), eval_episodes=eval_episodes)
    generation = positive_int("evo_steps" if evo_steps is not None else "evaluation_interval",
                              evo_steps if evo_steps is not None else evaluation_interval)
    options = RunOptions.of_call(locals(), "train_llm_rollout", evo_steps=generation,
                                 save_elite=bool(save_elite),
                                 csv_path=(csv_log_dir or "llm_rollout_metrics.csv") if csv else None)
    return run_llm_rollout(pop, env_factory, env_name, options, settings)


def run_llm_rollout(pop: list[Any], env_factory: Callable[[], RolloutHarness], env_name: str, options: RunOptions,
                    settings: RolloutSettings) -> tuple[list[Any], list[float]]:
    """The rollout loop on `options` (see :func:`train_llm_rollout`): a checkpoint folder falls
    back to the elite's; `eval_steps` does not apply (evaluation runs every held-out prompt)."""
    if not pop:
        raise ValueError("pop must contain at least one agent")
    if not all(isinstance(agent, RolloutLearner) for agent in pop) or len({type(a) for a in pop}) != 1:
        raise TypeError("train_llm_rollout trains a population of agile_llm rollout agents (GRPO, LLMPPO or "
                        "LLMREINFORCE; one algorithm)")
    warn_unusable_mutations(options.mutation)
    options = replace(options, checkpoint_path=options.checkpoint_path or options.elite_path, eval_steps=None)
    max_turns, logging, eval_loop = settings.max_turns, settings.completion_logging, options.eval_loop
    max_wall_seconds, max_reward, verbose = settings.max_wall_seconds, settings.max_reward, options.verbose

    def factory() -> RolloutHarness:
        harness = env_factory()
        harness.max_turns = max_turns
        harness.io_timeout_s = settings.io_timeout_s
        return harness

    if options.resume_from_checkpoint is not None:
        check_resume_base(options.resume_from_checkpoint, pop)
    algo = type(pop[0]).__name__
    source = _Source(env_name)
    config = {"algo": algo, "env": env_name, "population_size": len(pop), "max_steps": options.max_steps,
              "evo_steps": options.evo_steps, "max_turns": max_turns, "init_hp": options.init_hp,
              "mut_p": options.mut_p, "base_model": pop[0].base.reference}
    started = time.monotonic()
    evaluations = [0]

    def out_of_time() -> bool:
        return max_wall_seconds is not None and time.monotonic() - started >= max_wall_seconds

    def learn(agents: list[Any], requested: list[int], should_stop: Callable[[], bool]) -> list[PhaseResult]:
        steps = max(requested)  # every member takes the same learning steps
        results = [PhaseResult(vector_steps=0) for _ in agents]
        done = 0
        while done < steps and not should_stop() and not out_of_time():
            with PROFILER.sample:
                batches = [agent.collect(factory, agent.sample_seeds()) for agent in agents]
            with PROFILER.learn:
                losses = type(agents[0]).learn_members(agents, batches)
            for agent, result, loss, episodes in zip(agents, results, losses, batches, strict=True):
                record_losses(result.losses, loss)
                result.episodic_returns.extend(e.reward for e in episodes)
                result.episode_lengths.extend(len(e.completions) for e in episodes)
                agent.steps += 1
            done += 1
        if out_of_time():
            loop.stop_after_generation()  # the loop ends after this generation's evaluation
        for result in results:
            result.vector_steps = done
        return results

    def evaluate(agents: list[Any]) -> list[float]:
        fitnesses, samples = [], []
        for agent in agents:
            episodes: list[Episode] = []
            for _ in range(eval_loop):
                episodes.extend(agent.evaluate_episodes(factory, settings.eval_episodes))
            fitness = float(np.mean([e.reward for e in episodes]))
            agent.fitness.append(fitness)
            fitnesses.append(fitness)
            samples.append((agent, episodes))
        evaluations[0] += 1
        if logging is not None and evaluations[0] % max(1, logging.interval) == 0:
            _log_completions(logging, samples, evaluations[0], max_reward, verbose)
        return fitnesses

    loop = GenerationLoop.create(pop, source, lambda slot, agent, steps, stop: learn([agent], [steps], stop)[0],
                                 algo, env_name, options, config=config, trim_last=True, count_per_member=True)
    loop.batch_population(learn, evaluate, source, envs_per_agent=1)
    return loop.train(options.resume_from_checkpoint)


def _log_completions(config: CompletionLoggingConfig, samples: list[tuple[Any, list[Episode]]], evaluation: int,
                     max_reward: float | None, verbose: bool) -> None:
    records = []
    for agent, episodes in samples:
        accuracy = (None if max_reward is None else
                    float(np.mean([e.reward >= max_reward for e in episodes])))
        for episode in episodes[:max(0, config.num_samples)]:
            records.append({"evaluation": evaluation, "member": int(agent.index), "steps": int(agent.steps),
                            "prompt": episode.prompt, "completions": list(episode.completions),
                            "reward": episode.reward, "accuracy": accuracy})
    if config.jsonl_path is not None:
        path = Path(config.jsonl_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in records)
    if verbose:
        for r in records:
            print(f"[member {r['member']}] {r['prompt']!r} -> {r['completions']!r} reward {r['reward']:.3f}")
