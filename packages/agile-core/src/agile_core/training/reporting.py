"""Metrics, progress and the per-generation table of a training run behind one object."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np

from agile_core.algorithms.protocols import (
    PopulationMember,
    ReportsGenerationMetrics,
    has_capability,
)
from agile_core.hpo.lineage import Lineage
from agile_core.logging import (
    MetricsLogger,
    ProgressBar,
    build_logger,
    metric_names,
    print_generation_table,
)
from agile_core.logging.table import GenerationRow
from agile_core.training.evolution import EvolutionResult


class TrainingReporter:
    """What a single-agent training loop reports, under the stable metric names.

    Builds the :class:`~agile_core.logging.MetricsLogger` (TensorBoard / W&B per the loop's
    arguments) and logs the run `config` once; shows a :class:`ProgressBar` over the loop's steps
    (the population's, or one member's where the loop counts per member) and prints the
    generation table when `verbose`. Use as a context manager, or
    call :meth:`close`.

    With a `csv_path`, each evaluated generation is also appended to a :class:`GenerationHistory`
    beside it (``metrics.csv`` -> ``metrics.history.jsonl``), or to `history_path` when given.
    """

    def __init__(self, *, total_steps: int, desc: str = "", verbose: bool = True, wb: bool = False,
                 tensorboard: bool = False, tensorboard_log_dir: str | None = None,
                 wandb_api_key: str | None = None, wandb_kwargs: Mapping[str, Any] | None = None,
                 config: Mapping[str, Any] | None = None, csv_path: str | None = None,
                 history_path: str | None = None) -> None:
        self._logger_args: dict[str, Any] = {
            "tensorboard": tensorboard, "tensorboard_log_dir": tensorboard_log_dir, "wb": wb,
            "wandb_api_key": wandb_api_key, "wandb_kwargs": wandb_kwargs, "csv_path": csv_path,
        }
        self._config = dict(config) if config else None
        self._logger: MetricsLogger | None = None
        self.resume_step = 0
        self.verbose = verbose
        self.progress = ProgressBar(total_steps, desc=desc, verbose=verbose, enabled=None if verbose else False)
        self.best_fitness = -math.inf
        self._start = time.monotonic()
        self._start_step = 0
        if history_path is None and csv_path is not None:
            history_path = str(history_path_for(csv_path))
        self.history = GenerationHistory(history_path) if history_path is not None else None

    @property
    def logger(self) -> MetricsLogger:
        """The metrics logger, opened on first use (after a resume, so curves continue)."""
        if self._logger is None:
            # The loggers drop steps >= their resume step; the checkpoint's own step was logged
            # completely (it ends a generation), so keep it and drop only what came after.
            first_new_step = self.resume_step + 1 if self.resume_step else 0
            self._logger = build_logger(**self._logger_args, resume_step=first_new_step)
            if self._config:
                self._logger.log_hyperparameters(self._config)
        return self._logger

    def resume_at(self, global_steps: int) -> None:
        """Continue a resumed run: logged curves and the progress bar carry on from `global_steps`."""
        if self._logger is not None:
            raise RuntimeError("resume_at must be called before anything is logged")
        self.resume_step = self._start_step = int(global_steps)
        self.progress.set(global_steps)

    def expect(self, total_steps: int) -> None:
        """Set the progress bar's total: the steps the whole population will have taken by the end
        of the run (kept when unknown, i.e. not positive)."""
        if total_steps > 0:
            self.progress.total = int(total_steps)

    def advance(self, global_steps: int) -> None:
        """Move the progress bar to `global_steps` (the loop's count: the whole population's steps,
        or a member's in loops that count per member)."""
        self.progress.set(global_steps)

    def log_training(self, global_steps: int, episodic_returns: Sequence[float],
                     episode_lengths: Sequence[int], losses: Mapping[str, Sequence[float]]) -> None:
        """Mean return/length of finished training episodes and mean of each loss since the last call."""
        metrics: dict[str, float] = {}
        if episodic_returns:
            metrics[metric_names.TRAIN_EPISODIC_RETURN] = float(np.mean(episodic_returns))
            metrics[metric_names.TRAIN_EPISODE_LENGTH] = float(np.mean(episode_lengths))
        for name, values in losses.items():
            if values:
                key = metric_names.TRAIN_LOSS if name == "loss" else metric_names.train_loss(name)
                metrics[key] = float(np.mean(values))
        self.logger.log_scalars(global_steps, metrics)

    def log_generation(self, global_steps: int, generation: int, population: Sequence[PopulationMember],
                       fitnesses: Sequence[float], evolution: EvolutionResult | None = None, *,
                       population_steps: int | None = None) -> None:
        """Fitness, hyperparameters and throughput of an evaluated generation, then its evolution
        when given (call it before evolving: evolution relabels and may change members in place).
        `global_steps` is the step everything is logged at; `population_steps` (default: the
        same) the whole population's steps, logged as ``perf/global_steps``."""
        self.best_fitness = max([self.best_fitness, *(f for f in fitnesses if not math.isnan(f))])
        elapsed = max(time.monotonic() - self._start, 1e-9)
        self.logger.log_population(global_steps, {a.index: f for a, f in zip(population, fitnesses, strict=True)},
                                   {a.index: _numeric(a.hyperparameters()) for a in population})
        self.logger.log_scalars(global_steps, {
            metric_names.EVAL_MEAN_RETURN: float(np.mean(fitnesses)),
            metric_names.EVAL_BEST_FITNESS: self.best_fitness,
            metric_names.HPO_GENERATION: generation,
            metric_names.PERF_GLOBAL_STEPS: global_steps if population_steps is None else population_steps,
            metric_names.PERF_STEPS_PER_SECOND: (global_steps - self._start_step) / elapsed,
        })
        if self.history is not None:
            self.history.append(generation_record(global_steps, generation, population, fitnesses),
                                resume_step=self.resume_step)
        if self.verbose:
            rows = [GenerationRow(a.index, f, a.hyperparameters(), a.mut) for a, f in zip(population, fitnesses, strict=True)]
            mutable = sorted(population[0].hp_config) if population else []
            print_generation_table(rows, generation=generation, hyperparameters=mutable)  # only what can change
        if evolution is not None:
            self.log_evolution(global_steps, evolution)

    def log_evolution(self, global_steps: int, evolution: EvolutionResult) -> None:
        """The lineage and mutation events of one evolution step."""
        for child, parent in evolution.parents.items():
            self.logger.log_lineage(global_steps, parent, child)
        for index, description in evolution.mutations.items():
            self.logger.log_mutation(global_steps, index, description)

    def close(self) -> None:
        """Finish the progress bar and close the logger's backends."""
        self.progress.close()
        if self.history is not None:
            self.history.close()
        if self._logger is not None:
            self._logger.close()

    def __enter__(self) -> TrainingReporter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def history_path_for(csv_path: str | os.PathLike[str]) -> Path:
    """The generation history beside a metrics CSV: ``metrics.csv`` -> ``metrics.history.jsonl``."""
    path = Path(csv_path)
    return path.with_name(f"{path.stem}.history.jsonl")


class GenerationHistory:
    """``<stem>.history.jsonl``: one JSON object per evaluated generation (see `generation_record`).

    Opened on the first append. A new run (``resume_step == 0``) starts the file afresh; a resumed
    run keeps the complete lines with ``step <= resume_step`` (the generations its checkpoint
    covers; a torn last line is dropped) and appends after them. Each line is written whole and
    flushed, so a crash loses at most the line being written.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._handle: IO[str] | None = None

    def _open(self, resume_step: int) -> IO[str]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step > 0 and self.path.exists():
            kept = [line for line in _complete_lines(self.path) if _line_step(line) <= resume_step]
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
            os.replace(tmp, self.path)
            return open(self.path, "a", encoding="utf-8")
        return open(self.path, "w", encoding="utf-8")

    def append(self, record: Mapping[str, Any], resume_step: int = 0) -> None:
        """Write `record` as one line (opening the file on the first call)."""
        if self._handle is None:
            self._handle = self._open(resume_step)
        self._handle.write(json.dumps(record, allow_nan=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _complete_lines(path: Path) -> list[str]:
    """Newline-terminated lines of `path` that parse as JSON objects."""
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if not raw.endswith("\n"):
            break
        try:
            if isinstance(json.loads(raw), dict):
                lines.append(raw.rstrip("\n"))
        except ValueError:
            continue
    return lines


def _line_step(line: str) -> float:
    step = json.loads(line).get("step")
    return float(step) if isinstance(step, int | float) else math.inf


def generation_record(global_steps: int, generation: int, population: Sequence[PopulationMember],
                      fitnesses: Sequence[float]) -> dict[str, Any]:
    """One line of the generation history: the evaluated population, slot by slot.

    ``{"generation", "step" (population env steps), "time" (unix), "mutable" (names of the
    mutable hyperparameters), "elite_id", "agents": [{"slot", "id", "parent_id", "fitness",
    "mutation", "operator", "hyperparameters", "steps"}]}``. ``mutation`` describes what the
    evolution step before this generation did to the agent (``"None"``: nothing) and
    ``operator`` names the mutation operator (null when nothing was mutated); NaN is written as null.
    """
    agents = []
    for slot, (agent, fitness) in enumerate(zip(population, fitnesses, strict=True)):
        mutation = str(agent.mut)
        agents.append({
            "slot": slot, "id": int(agent.index),
            "parent_id": agent.lineage.parent_id,
            "fitness": _finite(fitness),
            "mutation": mutation,
            "operator": None if mutation == "None" else _last_operator(agent.lineage),
            "hyperparameters": {k: _finite(v) if isinstance(v, float) else v
                                for k, v in agent.hyperparameters().items()
                                if isinstance(v, int | float | str | bool) or v is None},
            "steps": int(agent.steps),
            **_agent_metrics(agent),
        })
    scored = [(f, a["id"]) for f, a in zip(fitnesses, agents, strict=True) if not math.isnan(f)]
    return {"generation": int(generation), "step": int(global_steps), "time": round(time.time(), 3),
            "mutable": sorted(population[0].hp_config) if population else [],
            "elite_id": max(scored, key=lambda pair: pair[0])[1] if scored else None, "agents": agents}


def _last_operator(lineage: Lineage) -> str | None:
    for event in reversed(lineage.history):
        if event.get("event") == "mutation":
            return str(event.get("operator"))
    return None


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _numeric(params: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in params.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _agent_metrics(agent: PopulationMember) -> dict[str, Any]:
    """``{"metrics": {...}}`` from an agent's ``generation_metrics()`` (e.g. a bandit's regret),
    finite numbers only; nothing for agents without it."""
    if not has_capability(agent, ReportsGenerationMetrics):
        return {}
    return {"metrics": {str(k): _finite(float(v)) for k, v in dict(agent.generation_metrics()).items()}}
