"""The CQN-on-CartPole learning check shared by the learning test and ``benchmarks/offline.py``:
record mixed-quality data from a partly trained DQN, train the example manifest's population on
it (evolution on), and train plain behaviour cloning on the same data for comparison."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import yaml

from agile_core.specs.manifest import TrainingManifest
from agile_core.trainer import LocalTrainer
from agile_offline.datasets import TransitionData, write_hdf5
from tests.offline.cartpole_data import mixed_quality, partly_trained_dqn

MANIFEST = Path(__file__).resolve().parents[2] / "configs" / "training" / "cqn_cartpole.yaml"


@dataclass
class OfflineResult:
    """What one seed of the check measured."""

    data_mean: float
    data_episodes: int
    cqn_best: float
    cqn_history: list[list[float]]
    cqn_seconds: float
    cqn_steps: int
    steps_to_pass: int | None
    bc_return: float


def behaviour_cloning_return(data: TransitionData, seed: int, steps: int = 3_000, episodes: int = 10) -> float:
    """Greedy mean return of an MLP classifier trained to predict the data's actions."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                 torch.nn.Linear(64, 2))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    obs = torch.as_tensor(data.observations, dtype=torch.float32)
    actions = torch.as_tensor(data.actions, dtype=torch.long)
    for _ in range(steps):
        rows = torch.randint(len(data), (128,), generator=generator)
        loss = torch.nn.functional.cross_entropy(policy(obs[rows]), actions[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(episodes):
        state, _ = env.reset(seed=seed * 1000 + episode)
        total, over = 0.0, False
        while not over:
            with torch.no_grad():
                action = int(policy(torch.as_tensor(state, dtype=torch.float32)).argmax())
            state, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            over = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def run_check(seed: int, folder: Path, threshold: float = 300.0, max_steps: int | None = None,
              manifest_path: Path = MANIFEST) -> OfflineResult:
    """Record the data for `seed`, train CQN and BC on it; the CQN run is the example manifest
    with its dataset path, seed and mutation seed set to this one (and `max_steps` when given)."""
    torch.set_num_threads(1)
    data = mixed_quality(partly_trained_dqn(seed), seed)
    returns = data.episode_returns()
    path = write_hdf5(data, folder / "cartpole_mixed.h5")
    raw = yaml.safe_load(manifest_path.read_text())
    raw["environment"]["dataset_path"] = str(path)
    raw["training"]["seed"] = seed
    raw["mutation"]["rand_seed"] = seed
    if max_steps is not None:
        raw["training"]["max_steps"] = max_steps
    manifest = TrainingManifest.get_validated(raw)
    start = time.monotonic()
    population, _ = LocalTrainer.from_manifest(manifest).train(verbose=False)
    seconds = time.monotonic() - start
    history = [list(agent.fitness) for agent in population]
    best_per_generation = [max(scores) for scores in zip(*history, strict=False)]
    bar = max(threshold, 1.5 * float(np.mean(returns)))
    passed = [g for g, score in enumerate(best_per_generation) if score >= bar]
    evo_steps = manifest.evo_steps
    return OfflineResult(
        data_mean=float(np.mean(returns)), data_episodes=len(returns), cqn_best=max(best_per_generation),
        cqn_history=history, cqn_seconds=seconds, cqn_steps=sum(agent.steps for agent in population),
        steps_to_pass=(passed[0] + 1) * evo_steps if passed else None,
        bc_return=behaviour_cloning_return(data, seed))
