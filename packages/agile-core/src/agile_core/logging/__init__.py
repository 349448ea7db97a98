"""Metrics logging shared by every paradigm: stable names, backends, console progress.

Backends with optional dependencies (TensorBoard, W&B) are imported lazily: the
packages are only needed when such a backend is created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import metric_names
from .backend import MetricsBackend
from .csv_backend import CsvBackend
from .factory import build_logger
from .logger import MetricsLogger
from .progress import ProgressBar
from .table import GenerationRow, format_generation_table, print_generation_table

if TYPE_CHECKING:
    from .tensorboard_backend import TensorBoardBackend
    from .wandb_backend import WandbBackend

__all__ = [
    "CsvBackend",
    "GenerationRow",
    "MetricsBackend",
    "MetricsLogger",
    "ProgressBar",
    "TensorBoardBackend",
    "WandbBackend",
    "build_logger",
    "format_generation_table",
    "metric_names",
    "print_generation_table",
]


def __getattr__(name: str) -> Any:
    """Import the optional backends on first access."""
    if name == "TensorBoardBackend":
        from .tensorboard_backend import TensorBoardBackend

        return TensorBoardBackend
    if name == "WandbBackend":
        from .wandb_backend import WandbBackend

        return WandbBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
