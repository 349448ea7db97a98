"""Ctrl-C during training: finish the current step, save a resumable checkpoint, then stop.

The first SIGINT only sets a flag that the loop checks at a safe point (between vector steps);
a second SIGINT interrupts at once, as usual.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

INTERRUPTED_EXIT_CODE = 130


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by Ctrl-C after saving a resumable checkpoint at `checkpoint_path`."""

    def __init__(self, checkpoint_path: Path | None, step: int) -> None:
        self.checkpoint_path = checkpoint_path
        self.step = step
        where = f"; resumable checkpoint saved at {checkpoint_path}" if checkpoint_path else ""
        super().__init__(f"training interrupted at step {step}{where}")

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
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:  # second Ctrl-C: stop now
            signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = True

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
