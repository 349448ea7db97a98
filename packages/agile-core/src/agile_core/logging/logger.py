"""The composite :class:`MetricsLogger` used by every training loop."""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from . import metric_names as names
from ._params import scrub_secrets
from .backend import MetricsBackend


def _as_step(step: Any) -> int:
    value = operator.index(step)
    if value < 0:
        raise ValueError(f"step must be >= 0, got {value}")
    return value


def _as_float(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"metric {name!r} must be a real number, got {type(value).__name__}"
        ) from exc


class MetricsLogger:
    """Fans metrics out to any number of backends under the documented names.

    ``resume_step`` is the global step a resumed run restarts from; the backends
    were opened with the same value so their curves continue without duplicates.
    With ``strict=True`` only names documented in :mod:`.metric_names` are accepted.
    A logger without backends is a valid no-op.  Thread-safe; usable as a context
    manager (closes all backends on exit).
    """

    def __init__(
        self,
        backends: Iterable[MetricsBackend] = (),
        *,
        resume_step: int = 0,
        strict: bool = False,
    ) -> None:
        self._backends: tuple[MetricsBackend, ...] = tuple(backends)
        self._resume_step = _as_step(resume_step)
        self._strict = strict
        self._lock = threading.RLock()
        self._closed = False

    @property
    def backends(self) -> tuple[MetricsBackend, ...]:
        """The backends metrics are sent to."""
        return self._backends

    @property
    def resume_step(self) -> int:
        """The global step this run (re)started at."""
        return self._resume_step

    @property
    def run_id(self) -> str | None:
        """The first backend run id (the W&B run id); store it in checkpoints."""
        for backend in self._backends:
            if backend.run_id is not None:
                return backend.run_id
        return None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"metric name must be a non-empty string, got {name!r}")
        if self._strict and not names.is_documented(name):
            raise ValueError(
                f"{name!r} is not a documented metric name (see agile_core.logging.metric_names)"
            )

    def _each(self, method: str, *args: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("MetricsLogger is closed")
            for backend in self._backends:
                getattr(backend, method)(*args)

    def log_scalars(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Log scalar ``metrics`` (name → number; numpy/torch scalars accepted) at ``step``."""
        step = _as_step(step)
        values: dict[str, float] = {}
        for name, value in metrics.items():
            self._check_name(name)
            values[name] = _as_float(name, value)
        if values:
            self._each("log_scalars", step, values)

    def log_scalar(self, step: int, name: str, value: Any) -> None:
        """Log a single scalar at ``step``."""
        self.log_scalars(step, {name: value})

    def log_text(self, step: int, name: str, text: str) -> None:
        """Log a text event (e.g. ``hpo/mutation``) at ``step``."""
        self._check_name(name)
        self._each("log_text", _as_step(step), name, str(text))

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        """Log the run configuration; fields named like key/token/secret/password are dropped."""
        self._each("log_hyperparameters", scrub_secrets(params))

    def log_population(
        self,
        step: int,
        fitness: Mapping[int | str, float],
        hyperparameters: Mapping[int | str, Mapping[str, float]] | None = None,
    ) -> None:
        """Log one generation: per-agent fitness, mean/best fitness and per-agent hyperparameters.

        ``fitness`` maps agent id → fitness; ``hyperparameters`` maps agent id →
        {hyperparameter name → value}.  NaN fitnesses are ignored for mean/best.
        """
        metrics: dict[str, float] = {
            names.hpo_fitness(a): _as_float(str(a), f) for a, f in fitness.items()
        }
        finite = [v for v in metrics.values() if not math.isnan(v)]
        if finite:
            metrics[names.HPO_MEAN_FITNESS] = sum(finite) / len(finite)
            metrics[names.HPO_BEST_FITNESS] = max(finite)
        for agent, params in (hyperparameters or {}).items():
            for name, value in params.items():
                metrics[names.hpo_hyperparameter(name, agent)] = _as_float(name, value)
        self.log_scalars(step, metrics)

    def log_mutation(self, step: int, agent_id: int | str, description: str) -> None:
        """Log an ``hpo/mutation`` event ``agent_<id>: <description>``."""
        self.log_text(step, names.HPO_MUTATION, names.mutation_text(agent_id, description))

    def log_lineage(
        self, step: int, parent_id: int | str, child_id: int | str, note: str = ""
    ) -> None:
        """Log an ``hpo/lineage`` event ``agent_<parent> -> agent_<child>``."""
        self.log_text(step, names.HPO_LINEAGE, names.lineage_text(parent_id, child_id, note))

    def flush(self) -> None:
        """Flush every backend."""
        self._each("flush")

    def close(self) -> None:
        """Close every backend, even if one fails (the first error is re-raised). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            error: BaseException | None = None
            for backend in self._backends:
                try:
                    backend.close()
                except Exception as exc:
                    error = error or exc
            if error is not None:
                raise error

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
