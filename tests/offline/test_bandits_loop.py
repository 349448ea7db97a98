"""train_bandits on core's GenerationLoop: a short evolutionary run, its metrics, checkpoints
(memories and covariance included) and an exact resume; the unbatched path; `agile train`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from agile_core.hpo.mutation import Mutations
from agile_core.hpo.selection import TournamentSelection
from agile_offline.bandits import BanditEnv, NeuralTS, NeuralUCB
from agile_offline.bandits.memory import BanditMemory
from agile_offline.bandits.training import train_bandits

NET = {"latent_dim": 8, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _env() -> BanditEnv:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(60, 3))
    return BanditEnv(features, list(np.argmax(features, axis=1)), seed=0)


def _population(cls: type = NeuralUCB, size: int = 2) -> list:
    env = _env()
    return [cls(env.single_observation_space, env.single_action_space, index=i, net_config=NET, seed=i,
                batch_size=8) for i in range(size)]


def _train(tmp_path: Path, pop: list, **kwargs: object) -> tuple[list, list[float]]:
    options: dict = {"max_steps": 60, "evo_steps": 20, "episode_steps": 10, "eval_steps": 10, "verbose": False,
                     "seed": 0, "selection_strategy": TournamentSelection(2, True, len(pop), rng=0),
                     "mutation": Mutations(no_mutation=0.2, architecture=0.4, parameters=0.2, rl_hp=0.2, rand_seed=0),
                     "csv_path": str(tmp_path / "metrics.csv")}
    options.update(kwargs)
    return train_bandits(_env(), "toy", "NeuralUCB", pop, **options)


def _metrics(path: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    with path.open() as handle:
        for row in csv.DictReader(handle):
            out.setdefault(row["name"], []).append(float(row["value"]))
    return out


def test_short_evolutionary_run_logs_regret(tmp_path: Path) -> None:
    pop, fitnesses = _train(tmp_path, _population(), checkpoint=20, checkpoint_path=str(tmp_path / "ckpt"))
    assert len(pop) == 2 and len(fitnesses) == 2 and all(0.0 <= f <= 1.0 for f in fitnesses)
    metrics = _metrics(tmp_path / "metrics.csv")
    assert len(metrics["train/regret"]) == 3 and all(0 <= r <= 20 for r in metrics["train/regret"])
    assert len(metrics["train/mean_reward"]) == 3 and "train/loss" in metrics
    assert metrics["train/episodic_return"]  # 20-step "episodes"
    assert all(agent.steps == 60 for agent in pop)
    assert all(agent.cumulative_regret >= agent.phase_regret for agent in pop)
    saved = sorted((tmp_path / "ckpt").iterdir())
    assert [p.name for p in saved][-1].endswith("60")
    assert sorted(p.name for p in saved[-1].glob("buffer_*")) == ["buffer_slot_0.safetensors",
                                                                  "buffer_slot_1.safetensors"]


@pytest.mark.parametrize("cls", [NeuralUCB, NeuralTS])
def test_resume_matches_an_uninterrupted_run(tmp_path: Path, cls: type) -> None:
    full, full_fitness = _train(tmp_path / "a", _population(cls), checkpoint=20,
                                checkpoint_path=str(tmp_path / "a" / "ckpt"))
    resumed, resumed_fitness = _train(tmp_path / "b", _population(cls),
                                      resume_from_checkpoint=str(tmp_path / "a" / "ckpt" / "checkpoint_000000040"))
    assert resumed_fitness == full_fitness
    for a, b in zip(full, resumed, strict=True):
        assert a.index == b.index and a.cumulative_regret == b.cumulative_regret
        for name in a.covariance:
            torch.testing.assert_close(a.covariance[name], b.covariance[name])
        for p, q in zip(a.net.parameters(), b.net.parameters(), strict=True):
            torch.testing.assert_close(p, q)
    tail = _metrics(tmp_path / "a" / "metrics.csv")["train/regret"][-1]
    assert _metrics(tmp_path / "b" / "metrics.csv")["train/regret"] == [tail]


def test_unbatched_path_and_memory_template(tmp_path: Path) -> None:
    pop, fitnesses = _train(tmp_path, _population(), batch_population=False, memory=BanditMemory(50, 9),
                            selection_strategy=None, mutation=None)
    assert len(fitnesses) == 2 and all(agent.steps == 60 for agent in pop)
    with pytest.raises(ValueError, match="memory holds contexts of 4 values"):
        _train(tmp_path, _population(), memory=BanditMemory(50, 4))
    with pytest.raises(ValueError, match="accelerator"):
        _train(tmp_path, _population(), accelerator=object())


def test_memory_ring_and_state_round_trip() -> None:
    memory = BanditMemory(3, 2)
    for value in range(5):
        memory.add(np.full(2, value, np.float32), float(value))
    assert len(memory) == 3 and sorted(memory.rewards.tolist()) == [2.0, 3.0, 4.0]
    twin = BanditMemory(3, 2)
    twin.load_state_dict(memory.state_dict())
    np.testing.assert_array_equal(twin.contexts, memory.contexts)
    assert twin.ptr == memory.ptr
    small = BanditMemory(2, 2)
    small.load_state_dict(memory.state_dict())
    assert sorted(small.rewards.tolist()) == [3.0, 4.0]


def test_agile_train_cli_end_to_end(tmp_path: Path) -> None:
    from agile_cli.main import main

    run_dir = tmp_path / "run"
    args = ["train", str(CONFIGS / "training" / "neural_ucb_iris.yaml"), "--run-dir", str(run_dir), "--quiet",
            "--set", "training.max_steps=40", "--set", "training.evo_steps=20", "--set", "training.pop_size=2",
            "--set", "training.eval_steps=20", "--checkpoint-steps", "20"]
    assert main(args) == 0
    history = [json.loads(line) for line in (run_dir / "metrics.history.jsonl").read_text().splitlines()]
    assert len(history) == 2
    assert "train/regret" in _metrics(run_dir / "metrics.csv")
    checkpoint = sorted((run_dir / "checkpoints").glob("checkpoint_*"))[0]
    resumed = tmp_path / "resumed"
    assert main([*args[:3], str(resumed), *args[4:], "--resume-from-checkpoint", str(checkpoint)]) == 0
    assert main(["plot", str(run_dir), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "fitness.png").is_file()
