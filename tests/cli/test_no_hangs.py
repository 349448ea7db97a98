"""Inputs that used to hang a command: each now ends within seconds with a clear error (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", ["validate", "train"])
def test_a_fifo_without_a_writer_is_refused_and_one_with_a_writer_is_read(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "manifest.yaml"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "agile_cli.main", command, str(fifo)], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 2, result.stderr
    assert "FIFO without a writer" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 30
    if command == "validate":  # `agile validate <(...)`: a FIFO with a writer reads as a file
        writer = subprocess.Popen(["sh", "-c", f"cat '{ROOT / 'configs/training/ppo_cartpole.yaml'}' > '{fifo}'"])
        read = subprocess.run([sys.executable, "-m", "agile_cli.main", "validate", str(fifo)], capture_output=True,
                              text=True, timeout=60)
        writer.wait(timeout=30)
        assert read.returncode == 0 and "valid (PPO" in read.stdout, read.stderr
