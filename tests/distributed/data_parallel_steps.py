"""A few learning steps of DQN and DDPG on fixed 64-row batches, data-parallel.

Run as ``accelerate launch --multi_gpu --num_processes N tests/distributed/data_parallel_steps.py OUT``
(each process learns from its 64 / N rows of every batch, gradients averaged over the processes)
or as ``python tests/distributed/data_parallel_steps.py OUT`` (one process, all 64 rows; with a
second argument ``half``, only the first 32). Each process writes its agents' weights to
``OUT/rank<r>.safetensors``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from gymnasium import spaces
from safetensors.torch import save_file

from agile_core.distributed.data_parallel import DataParallel, close_process_group
from agile_offpolicy import DDPG, DQN

ROWS = 64
STEPS = 4
OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


def batch(step: int, actions: np.ndarray) -> tuple[torch.Tensor, ...]:
    rng = np.random.default_rng(step)
    obs = rng.uniform(-1, 1, (ROWS, 3)).astype(np.float32)
    next_obs = rng.uniform(-1, 1, (ROWS, 3)).astype(np.float32)
    rewards = rng.normal(size=ROWS).astype(np.float32)
    terminated = (rng.random(ROWS) < 0.3).astype(np.float32)
    return tuple(torch.as_tensor(x) for x in (obs, actions, rewards, next_obs, terminated))


def main(out: Path, half: bool = False) -> None:
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    try:
        _learn_and_save(DataParallel(accelerator), out, half)
    finally:
        close_process_group(accelerator)


def _learn_and_save(group: DataParallel, out: Path, half: bool) -> None:
    share = ROWS // group.world_size // (2 if half else 1)
    rows = slice(group.rank * share, (group.rank + 1) * share)
    dqn = DQN(OBS, spaces.Discrete(3), net_config=NET, seed=0, lr=1e-2, double=True)
    ddpg = DDPG(OBS, spaces.Box(-1.0, 1.0, (2,), np.float32), net_config=NET, seed=0, lr_actor=1e-2,
                lr_critic=1e-2, policy_freq=2)
    with group.active():
        for step in range(STEPS):
            rng = np.random.default_rng(100 + step)
            discrete = batch(step, rng.integers(0, 3, ROWS))
            continuous = batch(step, rng.uniform(-1, 1, (ROWS, 2)).astype(np.float32))
            dqn.learn(tuple(t[rows] for t in discrete))
            ddpg.learn(tuple(t[rows] for t in continuous))
    tensors = {f"dqn.{name}": p.detach().contiguous() for name, p in dqn.actor.named_parameters()}
    tensors |= {f"ddpg.actor.{name}": p.detach().contiguous() for name, p in ddpg.actor.named_parameters()}
    tensors |= {f"ddpg.critic.{name}": p.detach().contiguous() for name, p in ddpg.critic.named_parameters()}
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / f"rank{group.rank}.safetensors"))


if __name__ == "__main__":
    main(Path(sys.argv[1]), half=sys.argv[2:] == ["half"])
