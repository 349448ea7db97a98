"""Ctrl-C during training: save a resumable checkpoint, then stop.

The first SIGINT sets a flag (`requested`) that the loop checks when the current training phase
ends: a checkpoint there resumes exactly like an uninterrupted seeded run. A second SIGINT
(`urgent`) stops the phase at the next vector step instead; that checkpoint resumes with the same
step counts, but the interrupted episode starts afresh. A third interrupts at once, as usual.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by Ctrl-C after saving a resumable checkpoint at `checkpoint_path`.

    `step` counts the steps per agent (what the checkpoint is named by); `total_steps`, when
    given, the steps of the whole population."""

    def __init__(self, checkpoint_path: Path | None, step: int, total_steps: int | None = None) -> None:
        self.checkpoint_path = checkpoint_path
        self.step = step
        self.total_steps = total_steps
        where = f"; resumable checkpoint saved at {checkpoint_path}" if checkpoint_path else ""
        total = f" ({total_steps:,} for the whole population)" if total_steps not in (None, step) else ""
        super().__init__(f"training interrupted at step {step:,} per agent{total}{where}")

    def resume_hint(self, manifest: str | None = None) -> str:
        """How to continue the run."""
        if self.checkpoint_path is None:
            return "no checkpoint was saved"
        if manifest:
            return f"agile train {manifest} --resume-from-checkpoint {self.checkpoint_path}"
        return f"pass resume_from_checkpoint='{self.checkpoint_path}'"


class InterruptGuard:
    """Context manager turning the first SIGINT into a flag (`requested`) for the training loop."""

    def __init__(self) -> None:
        self.presses = 0
        self._previous: Any = None
        self._installed = False

    @property
    def requested(self) -> bool:
        """Stop when the current training phase ends (first Ctrl-C)."""
        return self.presses >= 1

    @property
    def urgent(self) -> bool:
        """Stop the current phase at the next vector step (second Ctrl-C)."""
        return self.presses >= 2

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.presses += 1
        if self.presses == 1:
            sys.stderr.write("\nCtrl-C: finishing the current training phase, then saving an exact checkpoint "
                             "(Ctrl-C again to stop sooner)\n")
        elif self.presses == 2:
            sys.stderr.write("\nCtrl-C: stopping at the next step (the interrupted episode restarts on resume; "
                             "Ctrl-C again to quit without a checkpoint)\n")
            signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)
            self._installed = False
