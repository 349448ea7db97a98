"""The interface every metrics backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import TracebackType
from typing import Any


class MetricsBackend(ABC):
    """A destination for metrics (TensorBoard, W&B, CSV, ...).

    Backends receive already validated input from :class:`MetricsLogger`:
    ``step`` is a non-negative ``int``, metric values are ``float`` and
    hyperparameters have had secret-looking fields removed.
    """

    @property
    def run_id(self) -> str | None:
        """Identifier to store in a checkpoint so a resumed run continues this one."""
        return None

    @abstractmethod
    def log_scalars(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record scalar ``metrics`` at global step ``step``."""

    @abstractmethod
    def log_text(self, step: int, name: str, text: str) -> None:
        """Record a text event (e.g. a mutation) at global step ``step``."""

    @abstractmethod
    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        """Record the run configuration (a possibly nested mapping)."""

    def flush(self) -> None:
        """Push buffered data to its destination (default: nothing to do)."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Flush and release resources; further calls are not allowed. Idempotent."""

    def __enter__(self) -> MetricsBackend:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
