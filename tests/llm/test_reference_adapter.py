"""`reference: initial`: a frozen copy of the member's adapter as the KL (or DPO) reference,
kept as its own non-trainable adapter on the shared base; it survives clone and checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agile_llm.dpo import DPO
from agile_llm.grpo import GRPO
from agile_llm.specs import DPOSpec, GRPOSpec
from tests.llm.helpers import LORA, tiny
from tests.llm.test_grpo import make_factory

SETTINGS = {"lr": 5e-2, "batch_size": 2, "group_size": 4, "max_new_tokens": 3, "max_length": 32, "beta": 0.04}


def member(reference: str, seed: int = 0) -> GRPO:
    model, tokenizer = tiny()
    return GRPO(model, tokenizer=tokenizer, lora_config=LORA, seed=seed, reference=reference, **SETTINGS)


def train(agent: GRPO, steps: int) -> list[dict[str, float]]:
    factory = make_factory(agent.tokenizer)
    torch.manual_seed(0)
    return [agent.learn(agent.collect(factory, agent.sample_seeds())) for _ in range(steps)]


def perturb(agent: GRPO, seed: int) -> None:
    """Move the member's adapter (B included) off its start, as training would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in agent.adapter.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_initial_reference_stays_frozen_while_the_kl_to_it_grows() -> None:
    agent = member("initial")
    assert agent.reference_adapter_name is not None
    assert agent.reference_adapter_name in agent.base.adapters
    frozen = agent.reference_tensors()
    before = {k: v.detach().clone() for k, v in agent.adapter.state_dict().items()}
    assert same(frozen, before)
    stats = train(agent, 3)
    assert same(agent.reference_tensors(), frozen)  # the reference never trains
    assert not any(p.requires_grad for p in agent.base.adapter_parameters(agent.reference_adapter_name).values())
    moved = max(float((agent.adapter.state_dict()[k] - before[k]).abs().max()) for k in before)
    assert moved > 0
    assert stats[-1]["kl"] > 0  # the policy has left its initial copy
    # A fresh adapter starts at B = 0, so its frozen copy computes the base's function.
    episodes = agent.collect(make_factory(agent.tokenizer), agent.sample_seeds())
    batch = agent.rollout_batch(episodes)
    with torch.no_grad(), agent.base.reference_model(agent.adapter_name) as base_model:
        from agile_llm.rollout_learner import token_logprobs

        base_ref = token_logprobs(base_model, batch.ids, batch.attention)
    assert batch.ref is not None and torch.allclose(batch.ref, base_ref, atol=1e-5)
    assert not torch.allclose(batch.old, batch.ref, atol=1e-4)


def test_initial_reference_differs_from_the_base_when_loaded_from_a_trained_adapter(tmp_path: Path) -> None:
    trained = member("base")
    perturb(trained, 0)
    trained.save_checkpoint(tmp_path / "trained")
    agent = member("initial", seed=1)
    agent.load_checkpoint(tmp_path / "trained")  # an old-style checkpoint: no reference saved
    assert same(agent.reference_tensors(), dict(trained.adapter.state_dict()))
    batch = agent.rollout_batch(agent.collect(make_factory(agent.tokenizer), agent.sample_seeds()))
    assert batch.ref is not None and torch.allclose(batch.ref, batch.old, atol=1e-5)  # reference == loaded policy
    with torch.no_grad(), agent.base.reference_model(agent.adapter_name) as base_model:
        from agile_llm.rollout_learner import token_logprobs

        base_ref = token_logprobs(base_model, batch.ids, batch.attention)
    assert not torch.allclose(base_ref, batch.ref, atol=1e-4)


def test_base_reference_has_no_extra_adapter_and_is_unchanged() -> None:
    agent = member("base")
    assert agent.reference_adapter_name is None
    assert agent.reference_tensors() == {}
    assert len(agent.base.adapters) == 1
    assert agent.extra_tensors() == {}
    stats = train(agent, 1)
    assert stats[0]["kl"] >= 0


def test_clone_and_checkpoint_keep_the_reference(tmp_path: Path) -> None:
    agent = member("initial")
    perturb(agent, 0)
    agent.reset_reference()  # the reference now differs from the base (as after loading an adapter)
    frozen = agent.reference_tensors()
    perturb(agent, 1)
    train(agent, 1)
    assert same(agent.reference_tensors(), frozen)
    twin = agent.clone(index=3)
    assert twin.reference_adapter_name not in (None, agent.reference_adapter_name)
    assert same(twin.reference_tensors(), frozen)
    agent.save_checkpoint(tmp_path / "a")
    fresh = member("initial", seed=5)
    fresh.load_checkpoint(tmp_path / "a")
    assert same(fresh.reference_tensors(), frozen)
    assert not same(fresh.reference_tensors(), dict(fresh.adapter.state_dict()))
    warm = member("initial", seed=6)
    warm.load_weights(tmp_path / "a")
    assert same(warm.reference_tensors(), frozen)


def test_reference_adapters_are_released_with_their_members() -> None:
    agent = member("initial")
    base = agent.base
    twin = agent.clone(index=1)
    names = {agent.adapter_name, agent.reference_adapter_name, twin.adapter_name, twin.reference_adapter_name}
    assert names <= set(base.adapters)
    released = {twin.adapter_name, twin.reference_adapter_name}
    del twin
    import gc

    gc.collect()
    assert not released & set(base.adapters)
    assert {agent.adapter_name, agent.reference_adapter_name} <= set(base.adapters)


def test_dpo_uses_its_own_frozen_reference() -> None:
    model, tokenizer = tiny()
    agent = DPO(model, tokenizer=tokenizer, lora_config=LORA, reference="initial")
    assert agent.reference_adapter_name is not None
    assert DPOSpec.model_validate({"reference": "initial"}).reference == "initial"


def test_spec_rejects_an_unknown_reference() -> None:
    assert GRPOSpec.model_validate({}).reference == "base"
    with pytest.raises(ValueError, match="reference"):
        GRPOSpec.model_validate({"reference": "sft"})
    with pytest.raises(ValueError, match="reference"):
        member("sft")


def test_agile_train_with_an_initial_reference_checkpoints_and_resumes(tmp_path: Path) -> None:
    import shutil

    from agile_cli.main import main
    from agile_core.training.checkpointing import load_population
    from agile_llm.tiny import write_tiny
    from tests.llm.test_grpo import EXAMPLE, register_rollout

    register_rollout()
    write_tiny(tmp_path / "llm" / "tiny")
    (tmp_path / "training").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "training" / EXAMPLE.name)
    run_dir = tmp_path / "run"
    argv = ["train", str(tmp_path / "training" / EXAMPLE.name), "--run-dir", str(run_dir), "--quiet",
            "--set", "training.max_steps=2", "--set", "training.evo_steps=1", "--checkpoint-steps", "1",
            "--set", "algorithm.reference=initial", "--set", "algorithm.beta=0.04"]
    assert main(argv) == 0
    checkpoints = sorted((run_dir / "checkpoints").glob("checkpoint_*"))
    assert checkpoints
    assert main([*argv, "--run-dir", str(run_dir) + "-resumed", "--resume-from-checkpoint",
                 str(checkpoints[0])]) == 0
    from safetensors import safe_open

    with safe_open(str(checkpoints[0] / "agent_0.safetensors"), "pt") as saved:
        keys = list(saved.keys())
    adapter = {k.removeprefix("networks/adapter/") for k in keys if k.startswith("networks/adapter/")}
    reference = {k.removeprefix("extra/reference_adapter/") for k in keys if k.startswith("extra/reference_adapter/")}
    assert adapter and reference == adapter  # the reference adapter is saved beside the adapter
    population = load_population(checkpoints[0], restore_rng=False)
    assert all(agent.reference == "initial" and agent.reference_tensors() for agent in population.agents)
