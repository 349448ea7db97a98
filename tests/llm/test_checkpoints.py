"""Checkpoints: adapters + optimizer state round trip, base identity, run resume == uninterrupted."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agile_core.checkpoint import CheckpointError
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.hpo.mutation import Mutations
from agile_core.hpo.selection import TournamentSelection
from agile_llm.data import DatasetEnv
from agile_llm.dpo import DPO
from agile_llm.models import SharedBase
from agile_llm.sft import SFT
from agile_llm.tiny import number_rows
from agile_llm.training import train_llm_dataset
from tests.llm.helpers import LORA, tiny


def _state(agent) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in agent.adapter.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 0.0) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=atol, rtol=0) for k in a)


def test_agent_round_trip_and_files(tmp_path: Path) -> None:
    model, tokenizer = tiny()
    env = DatasetEnv(number_rows(), tokenizer, "sft", test_fraction=0.2)
    agent = SFT(model, tokenizer=tokenizer, lora_config=LORA, lr=1e-2, index=3, seed=0)
    for _ in range(2):
        agent.learn(env.sample(8, agent.rng))
    agent.set_hyperparameter("lr", 5e-3)
    path = agent.save_checkpoint(tmp_path / "agent")
    files = sorted(p.name for p in Path(path).iterdir())
    assert files and all(p.endswith((".safetensors", ".json")) for p in files)  # no pickle
    loaded = SFT.load(path)
    assert loaded.base is agent.base and loaded.adapter_name != agent.adapter_name
    assert _same(_state(loaded), _state(agent))
    assert loaded.lr == 5e-3 and loaded.optimizer.param_groups[0]["lr"] == 5e-3
    assert loaded.index == 3 and loaded.steps == agent.steps and loaded.learn_counter == 2
    saved_moments = [s["exp_avg"] for s in agent.optimizer.state.values()]
    loaded_moments = [s["exp_avg"] for s in loaded.optimizer.state.values()]
    assert all(torch.equal(a, b) for a, b in zip(saved_moments, loaded_moments, strict=True))
    assert int(loaded.rng.integers(1 << 30)) == int(agent.rng.integers(1 << 30))


def test_a_directory_base_is_referenced_by_path_and_shared(tmp_path: Path) -> None:
    model, tokenizer = tiny(seed=2)
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    agent = DPO(str(tmp_path / "base"), lora_config=LORA)
    twin = DPO(str(tmp_path / "base"), lora_config=LORA)
    assert twin.base is agent.base and agent.base.reference == str((tmp_path / "base").resolve())
    path = agent.save_checkpoint(tmp_path / "agent")
    assert DPO.load(path).base is agent.base


def test_a_different_base_is_refused(tmp_path: Path) -> None:
    model, tokenizer = tiny(seed=0)
    other_model, other_tokenizer = tiny(seed=1)
    agent = SFT(model, tokenizer=tokenizer, lora_config=LORA)
    path = agent.save_checkpoint(tmp_path / "agent")
    stranger = SFT(other_model, tokenizer=other_tokenizer, lora_config=LORA)
    with pytest.raises(CheckpointError, match="different base model"):
        stranger.load_checkpoint(path)
    with pytest.raises(CheckpointError, match="different base model"):
        stranger.load_weights(path)


def _run(pop, env, tmp: Path, **kwargs):
    hp = pop[0].hp_config
    return train_llm_dataset(
        pop, env, evo_steps=2, max_steps=4, checkpoint_steps=2, checkpoint_path=str(tmp),
        selection_strategy=TournamentSelection(2, True, len(pop), rng=0),
        mutation=Mutations(no_mutation=0.0, architecture=0.0, new_layer_prob=0.0, parameters=0.0,
                           activation=0.0, rl_hp=1.0, rand_seed=0) if hp else None,
        verbose=False, seed=0, **kwargs)


def test_resume_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    model, tokenizer = tiny()
    env = DatasetEnv(number_rows(), tokenizer, "sft", test_fraction=0.2)
    hp = HyperparameterConfig(lr=RLParameter(name="lr", min=1e-3, max=3e-2))

    def population():
        return [SFT(model, tokenizer=tokenizer, lora_config=LORA, lr=1e-2, batch_size=8, hp_config=hp,
                    index=i, seed=i) for i in range(2)]

    full, full_fitness = _run(population(), env, tmp_path / "a")
    resumed, resumed_fitness = _run(population(), env, tmp_path / "b",
                                    resume_from_checkpoint=str(tmp_path / "a" / "checkpoint_000000002"))
    assert resumed_fitness == pytest.approx(full_fitness, abs=1e-6)
    for a, b in zip(full, resumed, strict=True):
        assert (a.index, a.steps, a.lr) == (b.index, b.steps, b.lr)
        assert _same(_state(a), _state(b), atol=1e-6)
    other_model, other_tokenizer = tiny(seed=1)
    stranger = [SFT(other_model, tokenizer=other_tokenizer, lora_config=LORA)]
    with pytest.raises(CheckpointError, match="different base model"):
        train_llm_dataset(stranger, DatasetEnv(number_rows(), other_tokenizer, "sft"), max_steps=2,
                          verbose=False, resume_from_checkpoint=str(tmp_path / "a"))
    assert SharedBase.lookup(full[0].base.reference) is full[0].base
