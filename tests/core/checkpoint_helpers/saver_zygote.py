"""Fork server for the checkpoint kill test.

Importing torch takes seconds, so this process imports everything once and then, for each
JSON command line read from stdin, forks a child that saves checkpoints in an endless loop
(until the test SIGKILLs it). It answers ``{"pid": ...}`` after forking and
``{"status": ...}`` (the raw ``waitpid`` status) once the child is gone.

Each checkpoint of step ``s`` stores ``s`` in its metadata, as its step, and in every
element of a float tensor, an int64 tensor inside a nested optimizer-like dict and an
int32 numpy array, so a reader can check that nothing is mixed or torn. The child appends
``s`` to the progress file after ``save`` returned.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np
import torch

from agile_core.checkpoint import CheckpointManager, fsutil

SAFETY_SECONDS = 60.0


def make_parts(step: int, floats: int) -> dict[str, Any]:
    """State of one fake training step; every number in it equals ``step``."""
    return {
        "agent_0": {
            "weights": torch.full((floats,), float(step)),
            "optimizer": {
                "state": {0: {"step": torch.tensor(float(step))}},
                "param_groups": [{"lr": 1e-3}],
            },
            "counter": torch.full((3, 5), step, dtype=torch.int64)[:, ::2],  # non-contiguous view
            "step": step,
        },
        "buffer": {"obs": np.full((floats // 2,), step, dtype=np.int32), "size": step},
    }


def save_forever(command: dict[str, Any]) -> None:
    """Save checkpoints for steps ``start, start+1, ...`` until killed (or the safety timeout)."""
    fsutil.USE_RENAME_EXCHANGE = command["publish"] == "exchange"
    manager = CheckpointManager(
        command["root"],
        overwrite=command["mode"] == "overwrite",
        keep_last=None if command["mode"] == "overwrite" else 3,
    )
    progress = os.open(command["progress"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    deadline = time.monotonic() + SAFETY_SECONDS
    step = command["start"]
    while time.monotonic() < deadline:
        manager.save(step, make_parts(step, command["floats"]), metadata={"step": step})
        os.write(progress, f"{step}\n".encode())
        step += 1


def main() -> None:
    """Serve fork requests until stdin closes."""
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                save_forever(command)
            except BaseException as exc:  # report, then die without running parent cleanup
                print(f"saver child failed: {exc!r}", file=sys.stderr, flush=True)
                code = 1
            os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": status}), flush=True)


if __name__ == "__main__":
    main()
