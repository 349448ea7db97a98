"""The CLI on multi-agent manifests: `agile train` (with `--set`), `agile evaluate` on the
elite, `agile plot` on the run, and clean errors from `agile validate` / `agile train` for bad
multi-agent fields (exit 2, the field named, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agile_cli.main import main

MATD3 = """\
algorithm:
  name: MATD3
  batch_size: 16
  learn_step: 4
environment:
  name: mpe2.simple_speaker_listener_v4
  config:
    continuous_actions: true
    max_cycles: 25
  num_envs: 2
training:
  max_steps: 5000
  evo_steps: 50
  pop_size: 2
  eval_loop: 1
  learning_delay: 16
  seed: 0
network:
  latent_dim: 16
  encoder_config:
    hidden_size: [16]
  head_config:
    hidden_size: [16]
replay_buffer:
  max_size: 1000
mutation:
  probabilities:
    no_mut: 0.4
    arch_mut: 0.2
    new_layer: 0.2
    params_mut: 0.2
    act_mut: 0.0
    rl_hp_mut: 0.2
  rand_seed: 0
tournament_selection:
  tournament_size: 2
  elitism: true
"""

IPPO_TOY = """\
algorithm:
  name: IPPO
  batch_size: 32
  learn_step: 64
  update_epochs: 1
environment:
  name: tests.marl.toy_envs
  num_envs: 2
training:
  max_steps: 5000
  evo_steps: 64
  pop_size: 2
  seed: 0
network:
  latent_dim: 16
  encoder_config:
    hidden_size: [16]
  head_config:
    hidden_size: [16]
"""


def write(tmp_path: Path, text: str, name: str = "manifest.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny MATD3 run (2 generations of 2 members; `--set` cuts the manifest's budget)."""
    tmp_path = tmp_path_factory.mktemp("marl_cli")
    manifest = write(tmp_path, MATD3)
    run = tmp_path / "run"
    assert main(["train", str(manifest), "--set", "training.max_steps=100", "--run-dir", str(run), "--save-elite",
                 "--quiet"]) == 0
    return run


def test_train_writes_the_run_directory(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["agents"]) == 2
    assert summary["total_steps"] == 200  # the --set budget: 100 steps per member
    assert all(agent["steps"] == 100 and len(agent["fitness_history"]) == 2 for agent in summary["agents"])
    resolved = json.loads((run_dir / "manifest.resolved.json").read_text())
    assert resolved["training"]["max_steps"] == 100
    assert (run_dir / "elite" / "manifest.json").is_file()
    assert (run_dir / "metrics.csv").read_text().startswith("step,name,value,wall_time")


def test_evaluate_the_elite(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["evaluate", str(run_dir / "elite"), "--env", "mpe2.simple_speaker_listener_v4",
                 "--env-config", '{"continuous_actions": true}', "--episodes", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["episodes"] == 2 and report["mean_return"] < 0 and report["std_return"] >= 0


def test_plot_the_run(run_dir: Path, tmp_path: Path) -> None:
    assert main(["plot", str(run_dir), "--out", str(tmp_path / "figures")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert pngs == ["fitness.png", "hyperparameters.png", "lineage.png"]
    assert all((tmp_path / "figures" / name).stat().st_size > 1000 for name in pngs)


def test_train_ippo_on_a_module_env_with_overrides(tmp_path: Path) -> None:
    manifest = write(tmp_path, IPPO_TOY)
    run = tmp_path / "run"
    assert main(["train", str(manifest), "--set", "training.max_steps=128", "--set", "algorithm.lr=0.002",
                 "--run-dir", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert [agent["steps"] for agent in summary["agents"]] == [128, 128]


def test_validate_a_multi_agent_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(write(tmp_path, MATD3))]) == 0
    assert "valid (MATD3, multi_agent_off_policy)" in capsys.readouterr().out


def test_validate_rejects_a_non_python_env_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path, MATD3.replace("  num_envs: 2\n", "  num_envs: 2\n  path: envs/my_env.txt\n"))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "environment.path: must be a Python file ending in .py" in err and "Traceback" not in err


def test_train_on_a_missing_env_module_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`agile validate` does not import env modules (it is static, as for Gymnasium ids); training
    names the field and the module, without a traceback."""
    bad = write(tmp_path, MATD3.replace("mpe2.simple_speaker_listener_v4", "mpe2.no_such_env"))
    assert main(["train", str(bad), "--run-dir", str(tmp_path / "run"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "environment.name: cannot import module 'mpe2.no_such_env'" in err and "Traceback" not in err


def test_train_rejects_a_prioritized_buffer_for_maddpg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path, MATD3.replace("name: MATD3", "name: MADDPG")
                .replace("  max_size: 1000\n", "  max_size: 1000\n  per_buffer: true\n"))
    assert main(["train", str(bad), "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: replay_buffer.per_buffer: MADDPG learns from a uniform replay buffer" in err
    assert "Traceback" not in err
