"""`train_llm_dataset`: evolve a population of SFT or DPO members on a `DatasetEnv`.

Built on core's :class:`~agile_core.training.generations.GenerationLoop` (reporting, periodic
and Ctrl-C checkpoints, elite saving, resume). One training step is one learning step (one
batch) of every member; a generation is ``evo_steps`` steps when evolution is on, else
``evaluation_interval`` steps (the last one only what is left of ``max_steps``, so a run ends
exactly at it), and ends with every member's ``test`` on the held-out split (fitness: minus loss
for SFT, preference accuracy for DPO), then selection and mutation.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from agile_core.checkpoint import inspect_checkpoint
from agile_core.errors import RunWarning
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.protocols import SelectionStrategy
from agile_core.training.arguments import positive_int
from agile_core.training.checkpointing import resolve_run_checkpoint
from agile_core.training.generations import GenerationLoop, PhaseResult
from agile_core.training.options import RunOptions, documents_run_options
from agile_core.training.population import record_losses
from agile_core.training.profiling import PROFILER
from agile_llm.algorithm import LoRAFinetuner, check_base
from agile_llm.data import DatasetEnv

__all__ = ["run_llm_dataset", "train_llm_dataset"]

_KINDS = {"SFT": "sft", "DPO": "dpo"}


def _kind(agent: Any) -> str:
    for klass in type(agent).__mro__:
        if klass.__name__ in _KINDS:
            return _KINDS[klass.__name__]
    raise TypeError(f"train_llm_dataset trains SFT or DPO agents, not {type(agent).__name__}")


def learn_phase(population: list[Any], env: DatasetEnv, steps: int,
                should_stop: Callable[[], bool]) -> list[PhaseResult]:
    """Up to `steps` learning steps of every member (each on a batch drawn with its own
    generator and batch size); stops early once `should_stop()`."""
    results = [PhaseResult(vector_steps=0) for _ in population]
    algorithm = type(population[0])
    done = 0
    while done < steps and not should_stop():
        with PROFILER.sample:
            batches = [env.sample(agent.batch_size, agent.rng) for agent in population]
        with PROFILER.learn:
            losses = algorithm.learn_members(population, batches)
        for agent, result, loss in zip(population, results, losses, strict=True):
            record_losses(result.losses, loss)
            agent.steps += 1
        done += 1
    for result in results:
        result.vector_steps = done
    return results


UNUSABLE_OPERATORS = ("arch_mut", "params_mut", "act_mut")
"""Mutation operators LLM members cannot apply (fixed pretrained architecture and weights)."""


def warn_unusable_mutations(mutation: Mutations | None) -> None:
    """A RunWarning when `mutation` gives weight to operators LLM members cannot apply: a member
    drawn for one of them stays unchanged (manifests resolve those weights to 0 instead)."""
    if mutation is None:
        return
    from agile_core.hpo.mutation import OPERATORS

    wasted = {op: float(p) for op, p in zip(OPERATORS, mutation.probabilities, strict=True)
              if op in UNUSABLE_OPERATORS and p > 0}
    if wasted:
        warnings.warn(f"LLM members cannot apply {', '.join(wasted)}: a member drawn for them (probability "
                      f"{sum(wasted.values()):.2f}) stays unchanged; give them 0 (Mutations(architecture=0, "
                      "parameters=0, activation=0, ...))", RunWarning, stacklevel=3)


def check_resume_base(checkpoint: str | Path, pop: list[Any]) -> None:
    """CheckpointError when the run saved at `checkpoint` was trained on another base model."""
    metadata = inspect_checkpoint(resolve_run_checkpoint(checkpoint)).metadata
    for saved in metadata.get("agents", []):
        check_base(saved.get("extra") or {}, pop[0].base)


@documents_run_options
def train_llm_dataset(
    pop: list[Any],
    env: DatasetEnv | None = None,
    env_fn: Callable[[], DatasetEnv] | None = None,
    init_hp: dict[str, Any] | None = None,
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
    evaluation_interval: int = 10,
    verbose: bool = True,
    max_steps: int | None = None,
    num_epochs: int | None = None,
    *,
    resume_from_checkpoint: str | None = None,
    overwrite_checkpoints: bool = False,
    target: float | None = None,
    seed: int | None = None,
    mut_p: dict[str, Any] | None = None,
    accelerator: Any = None,
) -> tuple[list[Any], list[float]]:
    """Train a population of DPO or SFT agents over a :class:`DatasetEnv`.

    Step counts are learning steps per member (`max_steps` default: one epoch); `evo_steps`, which
    selection and mutation need, is then also the evaluation interval. Checkpoints go to
    `checkpoint_path`, else `elite_path`, else ``checkpoints``; a resume on another base model is
    refused. `seed` seeds torch's global generator at the start; mutations are of hyperparameters only.

    Args:
        pop: SFT or DPO agents (one algorithm), normally sharing one base model.
        env: The dataset; tokenised here with the population's tokenizer when it is not yet.
        env_fn: Factory of the dataset, called once when `env` is None (the dataset is
            read-only, so every member shares it).
        csv: Write every metric to a CSV file.
        csv_log_dir: The CSV file (default ``llm_metrics.csv``).
        evaluation_interval: Learning steps between evaluations when `evo_steps` is None.
        num_epochs: Epochs of the training split (at the first member's batch size); takes
            precedence over `max_steps`.

    Returns:
        The population after its last evaluation and each member's fitness from it.
    """
    _members_kind(pop)
    if env is None:
        if env_fn is None:
            raise ValueError("give env (a DatasetEnv) or env_fn")
        env = env_fn()
    _bind(env, pop)
    if num_epochs is not None:
        max_steps = positive_int("num_epochs", num_epochs) * env.steps_per_epoch(pop[0].batch_size)
    elif max_steps is None:
        max_steps = env.steps_per_epoch(pop[0].batch_size)
    max_steps = positive_int("max_steps", max_steps)
    generation = positive_int("evo_steps" if evo_steps is not None else "evaluation_interval",
                              evo_steps if evo_steps is not None else evaluation_interval)
    options = RunOptions.of_call(locals(), "train_llm_dataset", evo_steps=generation,
                                 save_elite=bool(save_elite),
                                 csv_path=(csv_log_dir or "llm_metrics.csv") if csv else None)
    return run_llm_dataset(pop, env, options)


def _members_kind(pop: list[Any]) -> str:
    """``"sft"`` or ``"dpo"``: the kind of every member of `pop` (one algorithm of agile_llm agents)."""
    if not pop:
        raise ValueError("pop must contain at least one agent")
    kinds = {_kind(agent) for agent in pop}
    if len(kinds) != 1 or len({type(agent) for agent in pop}) != 1:
        raise ValueError("every member of pop must be of the same algorithm (SFT or DPO)")
    if not all(isinstance(agent, LoRAFinetuner) for agent in pop):
        raise TypeError("train_llm_dataset trains agile_llm SFT or DPO agents")
    return kinds.pop()


def _bind(env: DatasetEnv, pop: list[Any]) -> None:
    """Tokenise `env` with the population's tokenizer, unless it already is (for their kind)."""
    kind = _members_kind(pop)
    if env.tokenizer is None:
        env.bind(pop[0].tokenizer, kind, pop[0].max_length)
    elif env.kind != kind:
        raise ValueError(f"the dataset was tokenised for {str(env.kind).upper()} but pop holds {kind.upper()} agents")


def run_llm_dataset(pop: list[Any], env: DatasetEnv, options: RunOptions) -> tuple[list[Any], list[float]]:
    """The SFT/DPO loop on `options` (see :func:`train_llm_dataset`): a checkpoint folder falls
    back to the elite's; `eval_steps` and `eval_loop` do not apply (evaluation is one pass over
    the test split)."""
    _bind(env, pop)
    warn_unusable_mutations(options.mutation)
    options = replace(options, checkpoint_path=options.checkpoint_path or options.elite_path, eval_steps=None,
                      eval_loop=1)
    if options.resume_from_checkpoint is not None:
        check_resume_base(options.resume_from_checkpoint, pop)
    algo = type(pop[0]).__name__
    config = {"algo": algo, "dataset": env.name, "population_size": len(pop), "max_steps": options.max_steps,
              "evo_steps": options.evo_steps, "init_hp": options.init_hp, "mut_p": options.mut_p,
              "train_rows": len(env.train), "test_rows": len(env.test), "base_model": pop[0].base.reference}

    def phase(slot: int, agent: Any, steps: int, should_stop: Callable[[], bool]) -> PhaseResult:
        return learn_phase([agent], env, steps, should_stop)[0]

    loop = GenerationLoop.create(pop, env, phase, algo, env.name, options, config=config, trim_last=True,
                                 count_per_member=True)

    def learn(agents: list[Any], steps: list[int], should_stop: Callable[[], bool]) -> list[PhaseResult]:
        return learn_phase(agents, env, max(steps), should_stop)  # every member the same steps

    def evaluate(agents: list[Any]) -> list[float]:
        return [float(agent.test(env)) for agent in agents]

    loop.batch_population(learn, evaluate, env, envs_per_agent=1)
    return loop.train(options.resume_from_checkpoint)
