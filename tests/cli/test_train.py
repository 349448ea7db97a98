"""`agile train`: real (tiny) runs in subprocesses, overrides, exit codes, Ctrl-C and resume."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "configs" / "training" / "ppo_cartpole.yaml"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TINY = ["--set", "training.max_steps=2048", "--set", "training.evo_steps=1024", "--set", "algorithm.learn_step=256",
        "--quiet"]


MANIFESTS = sorted((ROOT / "configs" / "training").glob("*.yaml"))
# Tiny budget for any manifest: training-section fields only, so every paradigm accepts them.
TINY_ANY = ["--set", "training.max_steps=1024", "--set", "training.evo_steps=512", "--set", "training.pop_size=2",
            "--set", "training.eval_loop=1", "--set", "training.eval_steps=500", "--quiet"]


def agile(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agile_cli.main", *args], capture_output=True, text=True,
                          env=ENV, cwd=ROOT, timeout=timeout)


def test_train_writes_run_directory_and_summary(tmp_path):
    result = agile("train", str(PPO), *TINY, "--set", "training.pop_size=2", "--run-dir", str(tmp_path / "run"),
                   "--save-elite")
    assert result.returncode == 0, result.stderr
    assert f"run directory: {tmp_path / 'run'}" in result.stdout
    assert "stopped: step budget spent (2048 steps per agent)" in result.stdout
    assert f"elite saved to {tmp_path / 'run' / 'elite'}" in result.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(summary["agents"]) == 2  # the --set override took effect
    assert {"agents", "total_steps", "wall_time_s", "steps_per_second", "elite_id", "target_reached",
            "target_reached_at_step"} <= set(summary)
    agent = summary["agents"][0]
    assert {"id", "parent_id", "fitness", "fitness_history", "hyperparameters", "steps"} <= set(agent)
    assert summary["total_steps"] == sum(a["steps"] for a in summary["agents"])
    resolved = json.loads((tmp_path / "run" / "manifest.resolved.json").read_text())
    assert resolved["training"]["pop_size"] == 2
    assert (tmp_path / "run" / "elite" / "manifest.json").is_file()
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert rows[0] == "step,name,value,wall_time"
    assert any(",eval/mean_return," in row for row in rows) and any(",perf/steps_per_second," in row for row in rows)


def _missing_env_dependency(manifest: Path) -> str | None:
    """Why the manifest's Gymnasium environment cannot be made here (None when it can, or when
    it is not a registered Gymnasium id: then training itself must work). Only an optional extra
    (Atari, MuJoCo...) excuses a skip: Box2D (dqn.yaml's LunarLander) is in the default install,
    so its absence fails the test."""
    import gymnasium as gym
    import yaml

    from agile_core.environments.extras import install_hint, missing_module

    env = (yaml.safe_load(manifest.read_text()) or {}).get("environment") or {}
    name = env.get("name")
    if not isinstance(name, str) or env.get("entrypoint") or env.get("path") or name not in gym.registry:
        return None
    try:
        gym.make(name).close()
    except gym.error.DependencyNotInstalled as exc:
        hint = install_hint(missing_module(exc))
        if hint is None or hint.extra is None:
            raise
        return f"{manifest.name}: {name} needs the `{hint.extra}` extra ({hint.install_command()})"
    return None


def _with_offline_dataset(manifest: Path, folder: Path) -> Path:
    """An offline manifest copied into `folder` beside a small dataset recorded for it with the
    documented `agile dataset record` command; any other manifest as it is."""
    import yaml

    env = (yaml.safe_load(manifest.read_text()) or {}).get("environment") or {}
    if not env.get("dataset_path"):
        return manifest
    copy = folder / manifest.name
    copy.write_text(manifest.read_text())
    recorded = agile("dataset", "record", "--env", env["name"], "--episodes", "20", "--seed", "0",
                     "--out", str(folder / env["dataset_path"]))
    assert recorded.returncode == 0, recorded.stderr
    return copy


def _with_tiny_llm(manifest: Path, folder: Path) -> tuple[Path, int]:
    """An LLM manifest (its model under ``../llm/tiny``) copied into ``folder/training`` beside a
    tiny model and data written there by ``configs/llm/make_tiny.py``, with a budget of 8 batches
    per member; any other manifest as it is, with 1024 steps."""
    if "../llm/tiny/" not in manifest.read_text():
        return manifest, 1024
    (folder / "training").mkdir()
    copy = folder / "training" / manifest.name
    copy.write_text(manifest.read_text())
    made = subprocess.run([sys.executable, str(ROOT / "configs" / "llm" / "make_tiny.py"), str(folder / "llm" / "tiny")],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert made.returncode == 0, made.stderr
    return copy, 8


def _rollouts_within_a_generation(manifest: Path) -> list[str]:
    """For an on-policy manifest whose rollout (`learn_step`, 1024 and more) is longer than the
    tiny budget's 512-step generation: a 512-step rollout. A generation is whole rollouts, so the
    manifest's own would take each generation past the whole 1024-step budget (one generation)."""
    import yaml

    learn_step = ((yaml.safe_load(manifest.read_text()) or {}).get("algorithm") or {}).get("learn_step")
    return ["--set", "algorithm.learn_step=512"] if isinstance(learn_step, int) and learn_step > 512 else []


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[m.name for m in MANIFESTS])
def test_every_example_manifest_trains_with_a_tiny_budget(manifest, tmp_path):
    reason = _missing_env_dependency(manifest)
    if reason:
        pytest.skip(reason)
    run_dir = tmp_path / "run"
    manifest = _with_offline_dataset(manifest, tmp_path)
    manifest, steps = _with_tiny_llm(manifest, tmp_path)
    budget = TINY_ANY if steps == 1024 else [*TINY_ANY, "--set", f"training.max_steps={steps}",
                                             "--set", f"training.evo_steps={steps // 2}"]
    budget = [*budget, *_rollouts_within_a_generation(manifest)]
    result = agile("train", str(manifest), *budget, "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["agents"]) == 2 and summary["total_steps"] >= 2 * steps
    assert all(agent["steps"] >= steps for agent in summary["agents"])
    assert (run_dir / "metrics.history.jsonl").read_text().count("\n") == 2  # two generations


def test_bad_override_exits_2_with_the_path(tmp_path):
    result = agile("train", str(PPO), "--set", "training.pop_size=-1", "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "training.pop_size: input should be greater than or equal to 1 (got -1)" in result.stderr
    assert "Traceback" not in result.stderr
    malformed = agile("train", str(PPO), "--set", "pop_size", "--run-dir", str(tmp_path / "r"))
    assert malformed.returncode == 2 and "--set expects dotted.key=value" in malformed.stderr


def test_conflicting_resume_options_exit_2(tmp_path):
    result = agile("train", str(PPO), "--resume-from-checkpoint", "a", "--load-weights-from", "b")
    assert result.returncode == 2 and "mutually exclusive" in result.stderr


def test_a_missing_resume_checkpoint_exits_2(tmp_path):
    result = agile("train", str(PPO), *TINY, "--resume-from-checkpoint", str(tmp_path / "missing"),
                   "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "cannot resume from checkpoint" in result.stderr and "no complete checkpoint found" in result.stderr
    assert "Traceback" not in result.stderr


FAILING_ENV = """
import gymnasium


class FailingCartPole(gymnasium.Wrapper):
    def __init__(self, **kwargs):
        super().__init__(gymnasium.make("CartPole-v1"))

    def step(self, action):
        raise RuntimeError("the simulator crashed")
"""


def test_training_failure_exits_1(tmp_path):
    (tmp_path / "failing_env.py").write_text(FAILING_ENV)
    manifest = tmp_path / "failing.yaml"
    manifest.write_text("algorithm: {name: PPO}\n"
                        "environment: {name: Failing, path: failing_env.py, entrypoint: FailingCartPole, num_envs: 1}\n"
                        "training: {max_steps: 256, evo_steps: 128, pop_size: 1}\n")
    result = agile("train", str(manifest), "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 1
    assert "training failed" in result.stderr and "RuntimeError: the simulator crashed" in result.stderr
    assert "Traceback" not in result.stderr


def test_python_dash_m_agile_train(tmp_path):
    result = subprocess.run([sys.executable, "-m", "agile.train", str(PPO), *TINY, "--set", "training.pop_size=1",
                             "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_ctrl_c_exits_130_and_the_checkpoint_resumes_to_the_end(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "agile_cli.main", "train", str(PPO), "--set", "training.pop_size=2",
         "--set", "training.max_steps=40960", "--set", "training.evo_steps=2048", "--set", "algorithm.learn_step=256",
         "--set", "training.target_score=null", "--quiet", "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    deadline = time.monotonic() + 180  # interrupt once training runs (start-up is slow on a busy machine)
    while not (run_dir / "metrics.csv").exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
    time.sleep(2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "--resume-from-checkpoint" in err
    assert f"--run-dir {run_dir}" in err and "--set training.pop_size=2" in err  # the hint repeats the run
    checkpoint = err.split("--resume-from-checkpoint", 1)[1].split()[0]
    resumed = agile("train", str(PPO), "--set", "training.pop_size=2", "--set", "training.max_steps=40960",
                    "--set", "training.evo_steps=2048", "--set", "algorithm.learn_step=256",
                    "--set", "training.target_score=null", "--quiet", "--run-dir", str(tmp_path / "resumed"),
                    "--resume-from-checkpoint", checkpoint, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert all(agent["steps"] >= 40960 for agent in summary["agents"] if agent["parent_id"] is None)


def test_local_trainer_minimal_example_and_deprecated_alias():
    import gymnasium as gym

    from agile import LocalTrainer
    from agile.models import (
        MutationProbabilities,
        MutationSpec,
        TournamentSelectionSpec,
        TrainingSpec,
    )

    env = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = LocalTrainer(
            algorithm="PPO", environment=env,
            training=TrainingSpec(max_steps=2048, evo_steps=1024, population_size=2),
            mutation=MutationSpec(probabilities=MutationProbabilities(no_mut=0.5, arch_mut=0.3, rl_hp_mut=0.2)),
            tournament=TournamentSelectionSpec(tournament_size=2, elitism=True),
        )
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    population, fitnesses = trainer.train(verbose=False)
    assert len(population) == 2 and len(fitnesses) == 2


def test_resume_and_warm_start_are_mutually_exclusive():
    from agile import LocalTrainer
    from agile_core.trainer import TrainerConfigError

    with pytest.raises(TrainerConfigError, match="mutually exclusive"):
        LocalTrainer(algorithm="PPO", environment="CartPole-v1", resume_from_checkpoint="a", load_weights_from="b")


def test_evaluate_a_saved_elite(tmp_path):
    result = agile("train", str(PPO), *TINY, "--set", "training.pop_size=1", "--run-dir", str(tmp_path / "run"),
                   "--save-elite")
    assert result.returncode == 0, result.stderr
    evaluated = agile("evaluate", str(tmp_path / "run" / "elite"), "--env", "CartPole-v1", "--episodes", "3", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout)
    assert report["episodes"] == 3 and report["mean_return"] > 0 and report["std_return"] >= 0
    missing = agile("evaluate", str(tmp_path / "nothing"), "--env", "CartPole-v1")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_every_training_function_is_reachable_from_agile_training():
    import agile.training

    for name in agile.training.__all__:
        assert callable(getattr(agile.training, name)), name
    assert {"train_llm_rollout", "train_llm_dataset", "train_offline", "train_bandits"} <= set(agile.training.__all__)
