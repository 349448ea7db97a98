"""Data-parallel training with Accelerate over two CPU processes (gloo): gradients averaged over
the processes give the same learning as one process with the doubled batch; a population stays
the same on every process through evolution; `accelerate launch -m agile.train` writes one run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("accelerate")
from safetensors.torch import load_file

from agile_core.distributed.data_parallel import DataParallel, average_gradients

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PPO = ROOT / "configs" / "training" / "ppo_cartpole.yaml"
TINY = {"training.max_steps": 256, "training.evo_steps": 128, "training.pop_size": 2, "training.eval_loop": 1,
        "training.eval_steps": 100, "training.target_score": "null", "environment.num_envs": 2,
        "algorithm.learn_step": 32, "algorithm.batch_size": 32, "algorithm.update_epochs": 2}
OVERRIDES = [f"{key}={value}" for key, value in TINY.items()]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch(*command: str, processes: int = 2) -> subprocess.CompletedProcess[str]:
    """`accelerate launch --multi_gpu --num_processes N` of a script (or ``-m module``): on a
    machine without GPUs, N CPU processes over gloo (``--cpu`` would start one process only)."""
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_port", str(_free_port())]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([*launcher, *command], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_two_processes_learn_as_one_process_with_the_doubled_batch(tmp_path: Path) -> None:
    script = str(HERE / "data_parallel_steps.py")
    _launch(script, str(tmp_path / "two"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, script, str(tmp_path / "one")], check=True, timeout=300, env=env)
    subprocess.run([sys.executable, script, str(tmp_path / "half"), "half"], check=True, timeout=300, env=env)
    rank0, rank1 = (load_file(tmp_path / "two" / f"rank{r}.safetensors") for r in (0, 1))
    one, half = load_file(tmp_path / "one" / "rank0.safetensors"), load_file(tmp_path / "half" / "rank0.safetensors")
    assert rank0.keys() == one.keys() and any(key.startswith("ddpg.critic") for key in one)
    for key, value in one.items():
        assert torch.equal(rank0[key], rank1[key]), key  # the processes never drift apart
        torch.testing.assert_close(rank0[key], value, atol=1e-5, rtol=0, msg=key)
    # the control: learning from one process's half of each batch alone ends elsewhere
    assert max(float((half[key] - one[key]).abs().max()) for key in one) > 1e-3


def _ranks_agree(out: Path) -> dict[str, Any]:
    rank0, rank1 = (json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0 == rank1  # fitness histories (the processes' mean), steps, members, weights, Adam states
    # the group is freed when closed, not at interpreter exit (where gloo can abort a rank); the LLM
    # run imports transformers after the group is up, whose import binds the group in
    # torch.distributed.nn.functional's default arguments
    assert rank0["gloo_threads_after_close"] == []
    checkpoints = sorted(path.name for path in (out / "checkpoints").iterdir())
    assert checkpoints and all("rank" not in name for name in checkpoints)
    return rank0


@pytest.mark.slow
def test_a_population_evolves_the_same_on_every_process(tmp_path: Path) -> None:
    _launch(str(HERE / "data_parallel_run.py"), str(tmp_path), str(PPO), *OVERRIDES)
    record = _ranks_agree(tmp_path)
    assert record["steps"] == [256, 256] and all(len(history) == 2 for history in record["fitness"])


@pytest.mark.slow
def test_llm_members_train_data_parallel(tmp_path: Path) -> None:
    """SFT adapters: each process learns from its own part of every batch, the adapters stay equal."""
    from agile_llm.tiny import write_tiny

    tiny = write_tiny(tmp_path / "tiny")
    manifest = {"algorithm": {"name": "SFT", "lr": 1e-2, "batch_size": 8, "max_length": 32},
                "environment": {"dataset": str(tiny / "sft.jsonl"), "prompt_template": "{prompt} =",
                                "test_fraction": 0.2},
                "network": {"pretrained_model_name_or_path": str(tiny / "model"),
                            "lora_config": {"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0,
                                            "target_modules": ["q_proj", "v_proj"]}},
                "training": {"max_steps": 4, "evo_steps": 2, "pop_size": 2, "seed": 0},
                "mutation": {"probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5}, "rand_seed": 0}}
    path = tmp_path / "sft.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    _launch(str(HERE / "data_parallel_run.py"), str(tmp_path / "out"), str(path))
    record = _ranks_agree(tmp_path / "out")
    assert record["steps"] == [4, 4]


@pytest.mark.slow
def test_accelerate_launch_of_agile_train_writes_one_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    flags = [arg for override in OVERRIDES for arg in ("--set", override)]
    result = _launch("-m", "agile.train", str(PPO), *flags, "--run-dir", str(run), "--quiet", "--save-elite")
    assert result.stdout.count("run directory:") == 1  # only the main process reports
    summary = json.loads((run / "summary.json").read_text())
    assert [agent["steps"] for agent in summary["agents"]] == [256, 256]
    assert (run / "manifest.resolved.json").exists() and (run / "elite").exists()


class _OneProcess:
    num_processes, process_index, is_main_process, device = 1, 0, True, "cpu"


def test_one_process_group_changes_nothing() -> None:
    group = DataParallel(_OneProcess())
    grad = torch.arange(4.0)
    with group.active():
        average_gradients([grad, None])
    assert torch.equal(grad, torch.arange(4.0))
    assert group.mean([1.0, 2.5]) == [1.0, 2.5] and group.broadcast(b"x") == b"x" and group.seed_offset() == 0


def test_something_else_than_an_accelerator_is_refused() -> None:
    from agile_core.trainer import LocalTrainer, TrainerConfigError

    with pytest.raises(TrainerConfigError, match=r"accelerate\.Accelerator"):
        LocalTrainer("PPO", "CartPole-v1", accelerator=object())
    with pytest.raises(TrainerConfigError, match="do not combine"):
        LocalTrainer("PPO", "CartPole-v1", accelerator=_OneProcess(), backend="ray")
    with pytest.raises(ValueError, match=r"accelerate\.Accelerator"):
        DataParallel(object())


CLOSE_AFTER_LATE_IMPORT = """
import os, sys
import torch.distributed as dist
from agile_core.distributed.data_parallel import close_process_group

class Accelerator:  # what close_process_group uses of accelerate's
    def end_training(self):
        dist.destroy_process_group()

def gloo_threads():
    return [t for t in os.listdir("/proc/self/task") if "gloo" in open(f"/proc/self/task/{t}/comm").read()]

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
import torch.distributed.nn.functional as functional  # imported with the group up: binds it as a default
assert isinstance(functional.broadcast.__defaults__[0], dist.ProcessGroup) and gloo_threads()
close_process_group(Accelerator())
assert functional.broadcast.__defaults__ == (None,), functional.broadcast.__defaults__
assert not gloo_threads(), gloo_threads()
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads threads from /proc")
def test_closing_frees_a_group_bound_by_a_late_import() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", CLOSE_AFTER_LATE_IMPORT], check=True, timeout=120, env=env, cwd=ROOT)
