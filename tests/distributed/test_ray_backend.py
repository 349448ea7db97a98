"""`--backend ray`: a PPO CartPole population trained in Ray actors equals the local
agent-by-agent run, survives a killed worker, and resumes from its checkpoints."""

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from agile_core.distributed import RayOptions
from agile_core.distributed.pool import WorkerPool
from agile_core.overrides import apply_overrides
from agile_core.specs.manifest import validate_source
from agile_core.trainer import LocalTrainer
from agile_core.yaml_source import read_manifest_file

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "configs" / "training" / "ppo_cartpole.yaml"
MAX_STEPS, EVO_STEPS, POP = 384, 128, 4  # three generations
TINY = {"training.max_steps": MAX_STEPS, "training.evo_steps": EVO_STEPS, "training.pop_size": POP,
        "training.eval_loop": 1, "training.eval_steps": 100, "training.target_score": "null",
        "training.batch_population": "false",
        "environment.num_envs": 2, "algorithm.learn_step": 32, "algorithm.batch_size": 32,
        "algorithm.update_epochs": 2}
OVERRIDES = [f"{key}={value}" for key, value in TINY.items()]


def manifest():
    return validate_source(apply_overrides(read_manifest_file(str(PPO)), OVERRIDES))


def histories(population):
    return [list(agent.fitness) for agent in population]


@pytest.fixture(scope="module")
def local_run():
    """The reference: the same manifest trained agent by agent in this process."""
    population, fitnesses = LocalTrainer.from_manifest(manifest()).train(verbose=False)
    return histories(population), [agent.steps for agent in population], fitnesses


def test_one_worker_per_member_equals_the_local_agent_by_agent_run(ray_instance, local_run):
    trainer = LocalTrainer.from_manifest(manifest(), backend="ray",
                                         ray_options=RayOptions(workers=POP, cpus_per_worker=0.5))
    population, fitnesses = trainer.train(verbose=False)
    expected_histories, expected_steps, expected_fitnesses = local_run
    assert len(population) == POP and all(len(h) == MAX_STEPS // EVO_STEPS for h in histories(population))
    assert histories(population) == expected_histories
    assert [agent.steps for agent in population] == expected_steps == [MAX_STEPS] * POP
    assert fitnesses == expected_fitnesses
    assert trainer.lost_workers == []


def test_agile_train_backend_ray_runs_to_completion_and_resumes(ray_instance, local_run, tmp_path):
    from agile_cli.main import main

    flags = [arg for override in OVERRIDES for arg in ("--set", override)]
    first = tmp_path / "run"
    code = main(["train", str(PPO), *flags, "--backend", "ray", "--ray-workers", "2", "--checkpoint-steps",
                 str(EVO_STEPS), "--run-dir", str(first), "--quiet"])
    assert code == 0
    summary = json.loads((first / "summary.json").read_text())
    assert [agent["fitness_history"] for agent in summary["agents"]] == local_run[0]
    assert [agent["steps"] for agent in summary["agents"]] == [MAX_STEPS] * POP
    assert summary["total_steps"] == MAX_STEPS * POP
    checkpoints = sorted(p for p in (first / "checkpoints").iterdir() if (p / "manifest.json").is_file())
    assert len(checkpoints) == MAX_STEPS // EVO_STEPS

    resumed = tmp_path / "resumed"  # from the last generation's start: the same run, finished again
    code = main(["train", str(PPO), *flags, "--backend", "ray", "--ray-workers", "2", "--run-dir", str(resumed),
                 "--resume-from-checkpoint", str(checkpoints[-2]), "--quiet"])
    assert code == 0
    again = json.loads((resumed / "summary.json").read_text())
    assert [agent["fitness_history"] for agent in again["agents"]] == local_run[0]


def test_a_worker_killed_mid_phase_is_replaced_and_the_run_finishes(ray_instance, local_run, monkeypatch):
    """SIGKILL worker 1's process shortly after the second generation's training was sent: its
    members are trained again on a fresh actor from the driver's copy, with the same results."""
    run = WorkerPool.run
    trainings = []
    killed = []

    def run_and_kill(self, slots, submit, request, *args):
        if request == "training":
            trainings.append(request)
            if len(trainings) == 2:
                pid = ray_instance.get(self.workers[1].pid.remote())
                timer = threading.Timer(0.3, lambda: (os.kill(pid, signal.SIGKILL), killed.append(pid)))
                timer.start()
        return run(self, slots, submit, request, *args)

    monkeypatch.setattr(WorkerPool, "run", run_and_kill)
    trainer = LocalTrainer.from_manifest(manifest(), backend="ray", ray_options=RayOptions(workers=2))
    population, _ = trainer.train(verbose=False)
    assert killed, "the worker was not killed"
    assert [lost.worker for lost in trainer.lost_workers] == [1]
    assert trainer.lost_workers[0].request in ("training", "evaluation")
    assert len(population) == POP
    assert [agent.steps for agent in population] == [MAX_STEPS] * POP
    assert histories(population) == local_run[0]
