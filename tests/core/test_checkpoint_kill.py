"""SIGKILL a process that saves checkpoints in a loop; every checkpoint left must be whole."""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agile_core.checkpoint import CheckpointManager, read_checkpoint

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL")

ZYGOTE = Path(__file__).parent / "checkpoint_helpers" / "saver_zygote.py"
KILLS = 20
FLOATS = 512 * 1024  # 2 MiB of float32 + 1 MiB of int32 per checkpoint
CONFIGS = [
    ("numbered", "exchange"),
    ("overwrite", "exchange"),
    ("overwrite", "backup"),
    ("numbered", "backup"),
]
SEED = 20240611


class Zygote:
    """The fork server process and a line reader with timeouts."""

    def __init__(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.process = subprocess.Popen(
            [sys.executable, str(ZYGOTE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.errors: list[str] = []
        threading.Thread(
            target=self._pump, args=(self.process.stdout, self.lines.put), daemon=True
        ).start()
        threading.Thread(
            target=self._pump, args=(self.process.stderr, self.errors.append), daemon=True
        ).start()
        assert self.receive(timeout=60.0) == {"ready": True}

    @staticmethod
    def _pump(stream: Any, sink: Any) -> None:
        for line in stream:
            sink(line)

    def receive(self, timeout: float = 30.0) -> dict[str, Any]:
        try:
            return json.loads(self.lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"fork server silent; stderr: {''.join(self.errors)}") from None

    def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    server = Zygote()
    yield server
    server.close()


def reported_steps(progress: Path) -> list[int]:
    if not progress.exists():
        return []
    return [int(line) for line in progress.read_text().split()]


def check_checkpoint(path: Path, expected_step: int | None = None) -> int:
    """Load ``path`` fully (with checksums) and check every stored number agrees."""
    checkpoint = read_checkpoint(path)
    step = checkpoint.step
    assert step is not None and checkpoint.metadata == {"step": step}
    if expected_step is not None:
        assert step == expected_step, f"{path} holds step {step}"
    agent, buffer = checkpoint.part("agent_0"), checkpoint.part("buffer")
    assert agent["step"] == step and buffer["size"] == step
    assert agent["weights"].shape == (FLOATS,) and bool((agent["weights"] == float(step)).all())
    assert agent["optimizer"]["state"][0]["step"].item() == float(step)
    assert agent["optimizer"]["param_groups"] == [{"lr": 1e-3}]
    assert torch.equal(agent["counter"], torch.full((3, 3), step, dtype=torch.int64))
    obs = buffer["obs"]
    assert isinstance(obs, np.ndarray) and obs.dtype == np.int32 and obs.shape == (FLOATS // 2,)
    assert bool((obs == step).all())
    return step


def verify_root(root: Path, mode: str, reported: list[int]) -> None:
    """Every checkpoint directory present loads whole; latest() is at least the last reported."""
    manager = CheckpointManager(root, overwrite=mode == "overwrite")
    numbered = (
        sorted(p for p in root.iterdir() if re.fullmatch(r"checkpoint_\d+", p.name))
        if root.exists()
        else []
    )
    for path in numbered:
        check_checkpoint(path, int(path.name.split("_")[1]))
    if mode == "numbered":
        assert len(numbered) <= 4, f"pruning fell behind: {numbered}"
    latest = manager.latest()
    if not reported:
        if latest is not None:
            check_checkpoint(latest)
        return
    assert latest is not None, (
        f"no checkpoint found although step {reported[-1]} was reported saved"
    )
    step = check_checkpoint(latest)
    assert step in (max(reported), max(reported) + 1), (
        f"latest holds {step}, last reported {max(reported)}"
    )


def test_sigkill_during_saves_never_leaves_a_broken_checkpoint(
    zygote: Zygote, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    leftovers_seen = 0
    for kill in range(KILLS):
        mode, publish = CONFIGS[kill % len(CONFIGS)]
        root = tmp_path / f"{mode}-{publish}"
        progress = tmp_path / f"{mode}-{publish}.progress"
        before = reported_steps(progress)
        start = max(before, default=-1) + 1
        zygote.send(
            {"root": str(root), "mode": mode, "publish": publish, "start": start,
             "progress": str(progress), "floats": FLOATS}
        )  # fmt: skip
        pid = zygote.receive()["pid"]
        threading.Event().wait(rng.uniform(0.0, 0.4))
        os.kill(pid, signal.SIGKILL)
        status = zygote.receive()["status"]
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            f"saver ended on its own (status {status}); stderr: {''.join(zygote.errors)}"
        )
        verify_root(root, mode, reported_steps(progress))
        leftovers_seen += root.exists() and any(
            p.name.startswith((".tmp-", ".old-")) for p in root.iterdir()
        )

    for mode, publish in CONFIGS:  # the next write cleans up whatever the kills left
        root = tmp_path / f"{mode}-{publish}"
        manager = CheckpointManager(
            root, overwrite=mode == "overwrite", keep_last=None if mode == "overwrite" else 3
        )
        step = max(reported_steps(tmp_path / f"{mode}-{publish}.progress"), default=-1) + 1
        manager.save(step, {"agent_0": {}, "buffer": {}}, metadata={"step": step})
        stray = [p.name for p in root.iterdir() if p.name.startswith((".tmp-", ".old-"))]
        assert stray == [], stray
    print(f"{KILLS} kills, {leftovers_seen} left staging/backup directories behind")
