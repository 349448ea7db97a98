"""W&B backend in offline mode: run directory, run id for resume, and no API key leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from agile_core.logging import build_logger
from agile_core.logging import metric_names as M

pytest.importorskip("wandb")

FAKE_KEY = "0123456789abcdef0123456789abcdefFAKEKEY0"


@pytest.fixture
def wandb_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wandb_dir = tmp_path / "wandb_root"
    wandb_dir.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(wandb_dir / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(wandb_dir / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(wandb_dir / "data"))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return wandb_dir


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_wandb_offline_run_never_leaks_the_key(
    wandb_env: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    kwargs = {
        "project": "agile-test",
        "dir": str(wandb_env),
        "config": {
            "lr": 1e-3,
            "api_key": FAKE_KEY,
            "nested": {"hf_token": "t0k", "note": f"key={FAKE_KEY}"},
        },
    }
    with build_logger(wb=True, wandb_api_key=FAKE_KEY, wandb_kwargs=kwargs) as logger:
        run_id = logger.run_id
        assert run_id
        run = logger.backends[0].run  # type: ignore[attr-defined]
        assert dict(run.config) == {"lr": 1e-3, "nested": {}}
        logger.log_hyperparameters({"gamma": 0.99, "WANDB_API_KEY": FAKE_KEY, "echo": FAKE_KEY})
        assert "echo" not in run.config and run.config["gamma"] == 0.99
        logger.log_scalars(0, {M.TRAIN_LOSS: 1.0, M.HPO_BEST_FITNESS: 2.0})
        logger.log_text(0, M.HPO_MUTATION, "agent_0: lr x2")
        logger.log_text(1, M.HPO_LINEAGE, f"agent_0 -> agent_1: {FAKE_KEY}")
    run_dirs = list((wandb_env / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(run_dirs) == 1 and (run_dirs[0] / f"run-{run_id}.wandb").is_file()
    captured = capfd.readouterr()
    assert FAKE_KEY not in captured.out and FAKE_KEY not in captured.err
    assert _files_containing(tmp_path, FAKE_KEY.encode()) == []
    assert not (tmp_path / "netrc").exists()


def test_wandb_resume_reuses_run_id(wandb_env: Path) -> None:
    kwargs = {"project": "agile-test", "dir": str(wandb_env), "mode": "offline"}
    with build_logger(wb=True, wandb_kwargs=kwargs, run_id="resume123", resume_step=500) as logger:
        assert logger.run_id == "resume123" and logger.resume_step == 500
        logger.log_scalars(500, {M.PERF_GLOBAL_STEPS: 500})
    assert list((wandb_env / "wandb").glob("offline-run-*-resume123"))
