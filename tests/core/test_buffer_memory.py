"""A buffer too large for this machine is refused before anything is allocated, with the size it
needs, what is available and how many rows would fit; through a manifest the error names
`replay_buffer.max_size` and `agile train` exits 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from agile_core.buffers import ReplayBuffer
from agile_core.buffers.memory import (
    BufferTooLargeError,
    available_memory,
    check_fits,
    format_bytes,
)

ROOT = Path(__file__).resolve().parents[2]


def test_an_impossible_buffer_is_refused_before_allocating():
    obs = spaces.Box(-1.0, 1.0, (4,), np.float32)
    with pytest.raises(BufferTooLargeError, match=r"replay buffer of 10,000,000,000,000 rows needs .* available"):
        ReplayBuffer(10**13, obs, spaces.Discrete(2))


def test_a_small_buffer_fits_and_the_estimate_matches_the_allocation():
    obs = spaces.Box(-1.0, 1.0, (4,), np.float32)
    buffer = ReplayBuffer(1000, obs, spaces.Discrete(2))
    check_fits(buffer.nbytes, 1000)
    assert available_memory() is None or available_memory() > buffer.nbytes


def test_sizes_read_like_sizes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * 1024**3) == "3.0 GB"


def test_agile_train_names_the_field_and_exits_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "agile_cli.main", "train", "configs/training/dqn_cartpole.yaml",
                             "--set", "replay_buffer.max_size=10000000000000", "--run-dir", str(tmp_path / "run"),
                             "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "replay_buffer.max_size: a replay buffer of 10,000,000,000,000 rows needs" in result.stderr
    assert "Traceback" not in result.stderr
