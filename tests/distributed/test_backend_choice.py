"""Choosing a backend: clear usage errors (exit 2) before anything trains, and Ray only
imported when a Ray run starts."""

import subprocess
import sys
from pathlib import Path

import pytest

from agile_cli.main import main
from agile_core.distributed import BackendError, RayOptions
from agile_core.trainer import LocalTrainer, TrainerConfigError

ROOT = Path(__file__).resolve().parents[2]
PPO = str(ROOT / "configs" / "training" / "ppo_cartpole.yaml")
DQN = str(ROOT / "configs" / "training" / "dqn_cartpole.yaml")


def test_without_ray_installed_the_cli_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    assert main(["train", PPO, "--backend", "ray", "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    assert "install agile-core[ray]" in capsys.readouterr().err


def test_a_paradigm_without_a_phase_hook_is_refused(tmp_path, capsys):
    assert main(["train", DQN, "--backend", "ray", "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "backend ray does not support paradigm off_policy yet" in err and "on_policy" in err


@pytest.mark.parametrize("flags", [["--address", "auto"], ["--ray-workers", "2"], ["--ray-gpus-per-worker", "1"]])
def test_ray_flags_need_the_ray_backend(tmp_path, capsys, flags):
    assert main(["train", PPO, *flags, "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    assert "only used with --backend ray" in capsys.readouterr().err


def test_bad_placements_are_refused_before_training():
    with pytest.raises(BackendError, match="workers must be >= 1"):
        RayOptions(workers=0)
    with pytest.raises(BackendError, match="cannot be combined with address"):
        RayOptions(address="auto", num_cpus=2)
    with pytest.raises(BackendError, match="do not fit the cluster"):
        RayOptions(workers=3).worker_count(members=4, cluster_cpus=2, cluster_gpus=0)
    assert RayOptions().worker_count(members=8, cluster_cpus=2, cluster_gpus=0) == 2
    assert RayOptions(cpus_per_worker=0.5).worker_count(members=3, cluster_cpus=2, cluster_gpus=0) == 3
    assert RayOptions(workers=4, cpus_per_worker=0.5).worker_count(members=2, cluster_cpus=2, cluster_gpus=0) == 2
    with pytest.raises(BackendError, match="GPU"):
        RayOptions(gpus_per_worker=1).worker_count(members=2, cluster_cpus=4, cluster_gpus=0)


def test_trainer_backend_arguments_are_checked():
    with pytest.raises(TrainerConfigError, match="backend must be one of local, ray"):
        LocalTrainer("PPO", "CartPole-v1", backend="dask")
    with pytest.raises(TrainerConfigError, match="ray_options need backend='ray'"):
        LocalTrainer("PPO", "CartPole-v1", ray_options=RayOptions())
    trainer = LocalTrainer("PPO", "CartPole-v1", backend="ray", device="cuda")
    with pytest.raises(BackendError, match="needs GPUs per worker"):
        trainer.train(verbose=False)


def test_importing_agile_does_not_import_ray():
    code = ("import sys, agile_core, agile_core.trainer, agile_core.distributed, agile_cli.commands.train; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_multi_process_launch_needs_accelerate_and_no_ray(tmp_path, monkeypatch, capsys):
    """Started as several processes (WORLD_SIZE > 1), `agile train` trains data-parallel with
    Accelerate: without it, or combined with --backend ray, it stops before writing anything."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setitem(sys.modules, "accelerate", None)  # `import accelerate` now fails
    assert main(["train", PPO, "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    assert "pip install accelerate" in capsys.readouterr().err
    assert main(["train", PPO, "--backend", "ray", "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    assert "use one or the other" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
