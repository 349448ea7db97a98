"""Metrics, progress and the per-generation table of a training run behind one object."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import numpy as np

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
    arguments) and logs the run `config` once; shows a :class:`ProgressBar` over the population's
    global steps and prints the generation table when `verbose`. Use as a context manager, or
    call :meth:`close`.
    """

    def __init__(self, *, total_steps: int, desc: str = "", verbose: bool = True, wb: bool = False,
                 tensorboard: bool = False, tensorboard_log_dir: str | None = None,
                 wandb_api_key: str | None = None, wandb_kwargs: Mapping[str, Any] | None = None,
                 config: Mapping[str, Any] | None = None, csv_path: str | None = None) -> None:
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

    @property
    def logger(self) -> MetricsLogger:
        """The metrics logger, opened on first use (after a resume, so curves continue)."""
        if self._logger is None:
            self._logger = build_logger(**self._logger_args, resume_step=self.resume_step)
            if self._config:
                self._logger.log_hyperparameters(self._config)
        return self._logger

    def resume_at(self, global_steps: int) -> None:
        """Continue a resumed run: logged curves and the progress bar carry on from `global_steps`."""
        if self._logger is not None:
            raise RuntimeError("resume_at must be called before anything is logged")
        self.resume_step = self._start_step = int(global_steps)
        self.progress.set(global_steps)

    def advance(self, global_steps: int) -> None:
        """Move the progress bar to `global_steps` (environment steps of the whole population)."""
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

    def log_generation(self, global_steps: int, generation: int, population: Sequence[Any],
                       fitnesses: Sequence[float], evolution: EvolutionResult | None = None) -> None:
        """Fitness, hyperparameters and throughput of an evaluated generation, then its evolution."""
        self.best_fitness = max([self.best_fitness, *(f for f in fitnesses if not math.isnan(f))])
        elapsed = max(time.monotonic() - self._start, 1e-9)
        self.logger.log_population(global_steps, {a.index: f for a, f in zip(population, fitnesses, strict=True)},
                                   {a.index: _numeric(a.hyperparameters()) for a in population})
        self.logger.log_scalars(global_steps, {
            metric_names.EVAL_MEAN_RETURN: float(np.mean(fitnesses)),
            metric_names.EVAL_BEST_FITNESS: self.best_fitness,
            metric_names.HPO_GENERATION: generation,
            metric_names.PERF_GLOBAL_STEPS: global_steps,
            metric_names.PERF_STEPS_PER_SECOND: (global_steps - self._start_step) / elapsed,
        })
        if self.verbose:
            rows = [GenerationRow(a.index, f, a.hyperparameters(), a.mut) for a, f in zip(population, fitnesses, strict=True)]
            print_generation_table(rows, generation=generation)
        if evolution is not None:
            for child, parent in evolution.parents.items():
                self.logger.log_lineage(global_steps, parent, child)
            for index, description in evolution.mutations.items():
                self.logger.log_mutation(global_steps, index, description)

    def close(self) -> None:
        """Finish the progress bar and close the logger's backends."""
        self.progress.close()
        if self._logger is not None:
            self._logger.close()

    def __enter__(self) -> TrainingReporter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _numeric(params: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in params.items() if isinstance(v, int | float) and not isinstance(v, bool)}
