"""Exception type raised when a checkpoint cannot be read safely."""

from __future__ import annotations

import os


class CheckpointError(ValueError):
    """A checkpoint is missing, malformed, truncated, unsupported or unsafe to load.

    The message always names the offending path (when there is one) and the problem.
    """

    def __init__(self, path: str | os.PathLike[str] | None, problem: str) -> None:
        self.path = None if path is None else os.fspath(path)
        self.problem = problem
        super().__init__(problem if self.path is None else f"{self.path}: {problem}")
