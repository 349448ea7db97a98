"""A W&B API key given on the command line is never written anywhere the run writes: the run
directory, W&B's own files (metadata records the command line), logs or errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb")

ROOT = Path(__file__).resolve().parents[2]
KEY = "FAKE-" + "0123456789abcdef" * 2 + "-SECRET"


def _files_containing(folder: Path, text: str) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and text.encode() in path.read_bytes():
            found.append(str(path.relative_to(folder)))
    return found


def test_wandb_key_from_the_command_line_is_never_written(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "HOME": str(tmp_path / "home"), "WANDB_CONFIG_DIR": str(tmp_path / "home" / ".config" / "wandb"),
           "WANDB_CACHE_DIR": str(tmp_path / "home" / ".cache" / "wandb")}
    env.pop("WANDB_API_KEY", None)
    env.pop("WANDB_DIR", None)
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "agile_cli.main", "train", str(ROOT / "configs" / "training" / "dqn_cartpole.yaml"),
         "--set", "training.max_steps=512", "--set", "training.evo_steps=256", "--set", "training.pop_size=2",
         "--set", "training.learning_delay=64", "--set", "training.eval_steps=50", "--quiet",
         "--wb", "--wandb-api-key", KEY, "--run-dir", str(run_dir)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert KEY not in result.stdout and KEY not in result.stderr
    wandb_files = list(run_dir.rglob("wandb-metadata.json")) + list(run_dir.rglob("*.wandb"))
    assert wandb_files, "W&B's local files should be inside the run directory"
    assert _files_containing(tmp_path, KEY) == []
