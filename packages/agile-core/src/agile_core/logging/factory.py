"""``build_logger``: the one place training loops turn logging options into a MetricsLogger."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .backend import MetricsBackend
from .logger import MetricsLogger

DEFAULT_TENSORBOARD_ROOT = "runs"


def _default_tensorboard_dir() -> str:
    return str(Path(DEFAULT_TENSORBOARD_ROOT) / time.strftime("agile-%Y%m%d-%H%M%S"))


def build_logger(
    *,
    tensorboard: bool = False,
    tensorboard_log_dir: str | None = None,
    wb: bool = False,
    wandb_api_key: str | None = None,
    wandb_kwargs: Mapping[str, Any] | None = None,
    csv_path: str | None = None,
    resume_step: int = 0,
    run_id: str | None = None,
    strict: bool = False,
) -> MetricsLogger:
    """Build a :class:`MetricsLogger` with the requested backends.

    ``tensorboard`` enables TensorBoard in ``tensorboard_log_dir`` (default
    ``runs/agile-<timestamp>``; required when resuming, so the curves continue in
    the same directory).  ``wb`` enables W&B with ``wandb_api_key`` (or
    ``WANDB_API_KEY``) and ``wandb_kwargs`` for ``wandb.init`` (``project`` defaults
    to ``"agile"``).  ``csv_path`` enables the CSV backend.  ``resume_step`` is the
    global step a resumed run starts at and ``run_id`` the W&B run id stored in its
    checkpoint.  With no backend enabled the logger is a no-op.  If a backend
    fails to start, those already opened are closed before the error propagates.
    """
    if resume_step < 0:
        raise ValueError(f"resume_step must be >= 0, got {resume_step}")
    if tensorboard and tensorboard_log_dir is None and resume_step > 0:
        raise ValueError("resuming TensorBoard logging needs the original tensorboard_log_dir")
    backends: list[MetricsBackend] = []
    try:
        if tensorboard:
            from .tensorboard_backend import TensorBoardBackend

            log_dir = tensorboard_log_dir or _default_tensorboard_dir()
            backends.append(TensorBoardBackend(log_dir, resume_step=resume_step))
        if csv_path is not None:
            from .csv_backend import CsvBackend

            backends.append(CsvBackend(csv_path, resume_step=resume_step))
        if wb:
            from .wandb_backend import WandbBackend

            kwargs = dict(wandb_kwargs or {})
            project = str(kwargs.pop("project", "agile"))
            backends.append(
                WandbBackend(wandb_api_key, project=project, run_id=run_id, wandb_kwargs=kwargs)
            )
    except BaseException:
        for backend in backends:
            backend.close()
        raise
    return MetricsLogger(backends, resume_step=resume_step, strict=strict)
