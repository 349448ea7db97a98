"""Members share one frozen base and differ only in their adapters; cloning; the DPO loss."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from agile_llm.data import DatasetEnv
from agile_llm.dpo import DPO, dpo_loss
from agile_llm.models import BaseModelError, SharedBase
from agile_llm.sft import SFT
from agile_llm.tiny import number_rows, preference_rows
from tests.llm.helpers import LORA, tiny


@pytest.fixture
def model_and_tokenizer():
    return tiny()


def _adapter(agent) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in agent.adapter.state_dict().items()}


def test_population_shares_one_base_module_and_owns_distinct_adapters(model_and_tokenizer) -> None:
    model, tokenizer = model_and_tokenizer
    pop = [SFT(model, tokenizer=tokenizer, lora_config=LORA, index=i, seed=i) for i in range(3)]
    assert all(agent.base is pop[0].base for agent in pop)
    assert all(agent.base.base_model is model for agent in pop)  # one module object
    names = {agent.adapter_name for agent in pop}
    assert len(names) == 3
    params = [{id(p) for p in agent.adapter.parameters()} for agent in pop]
    assert not (params[0] & params[1]) and not (params[1] & params[2])
    assert all(not p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)
    keys = {tuple(sorted(agent.adapter.state_dict())) for agent in pop}
    assert len(keys) == 1  # keys do not depend on the adapter name


def test_learning_changes_only_the_active_adapter(model_and_tokenizer) -> None:
    model, tokenizer = model_and_tokenizer
    env = DatasetEnv(number_rows(), tokenizer, "sft", test_fraction=0.2)
    a, b = (SFT(model, tokenizer=tokenizer, lora_config=LORA, lr=1e-2, index=i, seed=i) for i in range(2))
    base_before = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    b_before = _adapter(b)
    for _ in range(3):
        a.learn(env.sample(8, a.rng))
    assert all(torch.equal(b_before[k], v) for k, v in _adapter(b).items())
    assert any(not torch.equal(b_before[k], v) for k, v in _adapter(a).items())
    assert all(torch.equal(base_before[k], v) for k, v in model.state_dict().items() if "lora_" not in k)


def test_clone_copies_then_trains_independently(model_and_tokenizer) -> None:
    model, tokenizer = model_and_tokenizer
    env = DatasetEnv(number_rows(), tokenizer, "sft", test_fraction=0.2)
    parent = SFT(model, tokenizer=tokenizer, lora_config=LORA, lr=1e-2, index=0, seed=0)
    for _ in range(2):
        parent.learn(env.sample(8, parent.rng))
    parent.fitness.append(-1.0)
    child = parent.clone(index=5)
    assert child.base is parent.base and child.adapter_name != parent.adapter_name
    assert child.index == 5 and child.lineage.parent_id == 0 and child.fitness == [-1.0]
    assert all(torch.equal(v, _adapter(parent)[k]) for k, v in _adapter(child).items())
    moments = [s["exp_avg"] for s in child.optimizer.state.values()]
    parent_moments = [s["exp_avg"] for s in parent.optimizer.state.values()]
    assert len(moments) == len(parent_moments) > 0
    assert all(m.data_ptr() != p.data_ptr() for m, p in zip(moments, parent_moments, strict=True))
    before = _adapter(parent)
    child.learn(env.sample(8, child.rng))
    assert all(torch.equal(before[k], v) for k, v in _adapter(parent).items())
    assert child.evaluate_loss(env) != parent.evaluate_loss(env)


def test_dropped_members_release_their_adapters(model_and_tokenizer) -> None:
    model, tokenizer = model_and_tokenizer
    keep = SFT(model, tokenizer=tokenizer, lora_config=LORA)
    gone = keep.clone(index=1)
    name = gone.adapter_name
    assert name in keep.base.adapters
    del gone
    gc.collect()
    assert name not in keep.base.adapters and name not in keep.base.peft_model.peft_config
    base = keep.base
    del keep
    gc.collect()
    assert base.adapters == []
    later = DPO(base)  # a base whose members are all gone takes new ones (reference included)
    env = DatasetEnv(preference_rows(), tokenizer, "dpo", test_fraction=0.2)
    assert later.learn(env.sample(2, later.rng))["margin"] == 0.0


def test_a_member_collected_in_the_middle_of_peft_work_does_not_break_it(model_and_tokenizer) -> None:
    """The collector may free a member, and run its finalizer, while peft iterates over the
    model's modules (as when it adds the next member's adapter): the release waits for a safe
    point instead of changing those dictionaries under the iteration."""
    model, tokenizer = model_and_tokenizer
    keep = SFT(model, tokenizer=tokenizer, lora_config=LORA)
    gone = keep.clone(index=1)
    name = gone.adapter_name
    walk = keep.base.peft_model.named_modules()
    while not next(walk)[0].endswith(f"lora_A.{keep.adapter_name}"):  # inside one adapter dictionary
        pass
    del gone
    gc.collect()  # the finalizer runs here, in the middle of the walk
    assert sum(1 for _ in walk) > 0
    assert keep.base.adapters == [keep.adapter_name]
    assert name not in keep.base.peft_model.peft_config


def test_models_with_adapters_are_refused(model_and_tokenizer) -> None:
    from peft import LoraConfig, get_peft_model

    model, tokenizer = model_and_tokenizer
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"]))
    with pytest.raises(BaseModelError, match="already has peft adapters"):
        SharedBase(peft_model, tokenizer)
    with pytest.raises(BaseModelError, match="adapters are attached to the model"):
        SharedBase(peft_model.base_model.model, tokenizer)


def test_dpo_loss_matches_hand_computation() -> None:
    pc, pr = torch.tensor([-3.0, -5.0]), torch.tensor([-4.0, -2.0])
    rc, rr = torch.tensor([-3.5, -4.0]), torch.tensor([-3.0, -3.0])
    loss, margins = dpo_loss(pc, pr, rc, rr, beta=0.5)
    # pair 0: 0.5 * ((-3 + 3.5) - (-4 + 3)) = 0.75; pair 1: 0.5 * ((-5 + 4) - (-2 + 3)) = -1
    assert margins.tolist() == [0.75, -1.0]
    expected = (np.log1p(np.exp(-0.75)) + np.log1p(np.exp(1.0))) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(loss) == pytest.approx(float(-F.logsigmoid(margins).mean()))


def test_dpo_starts_at_the_reference(model_and_tokenizer) -> None:
    model, tokenizer = model_and_tokenizer
    env = DatasetEnv(preference_rows(), tokenizer, "dpo", test_fraction=0.2)
    agent = DPO(model, tokenizer=tokenizer, lora_config=LORA)
    losses = agent.learn(env.sample(4, agent.rng))  # B = 0 at start: policy == reference
    assert losses["dpo_loss"] == pytest.approx(np.log(2), abs=1e-6) and losses["margin"] == 0.0
    assert len(agent.base.reference_cache) == 8  # 4 chosen + 4 rejected rows, computed once
    fresh = DPO(model, tokenizer=tokenizer, lora_config=LORA)
    assert fresh.evaluate_preferences(env) == (0.5, 0.0)  # ties count one half


def test_invalid_hyperparameters_are_rejected(model_and_tokenizer) -> None:
    model, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match="beta"):
        DPO(model, tokenizer=tokenizer, lora_config=LORA, beta=0.0)
    with pytest.raises(BaseModelError, match="tokenizer"):
        SFT(model)


def test_a_name_not_in_the_cache_fails_offline_without_trying_the_network(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path) -> None:
    """Loading runs in the Hub's offline mode (no connection retries) and restores the setting."""
    import transformers
    from huggingface_hub import constants

    from agile_llm.models import load_causal_lm

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    seen = []
    original = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.append(constants.HF_HUB_OFFLINE)
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    before = constants.HF_HUB_OFFLINE
    with pytest.raises(BaseModelError, match="nothing is downloaded at run time"):
        load_causal_lm("some-org/not-a-cached-model")
    assert seen == [True]
    assert constants.HF_HUB_OFFLINE is before


def test_a_members_seed_fixes_its_adapters_initial_weights_and_leaves_torch_global_generator_alone() -> None:
    """Two builds from the same seeds start from the same adapters (so a seeded run repeats); other
    seeds give other adapters; torch's global generator is as it was after each build."""
    def adapters(seeds: list[int]) -> list[dict[str, torch.Tensor]]:
        model, tokenizer = tiny()
        torch.manual_seed(123)
        state = torch.get_rng_state()
        pop = [SFT(model, tokenizer=tokenizer, lora_config=LORA, index=i, seed=seed) for i, seed in enumerate(seeds)]
        assert torch.equal(torch.get_rng_state(), state)
        return [_adapter(agent) for agent in pop]

    first, again, other = adapters([0, 1]), adapters([0, 1]), adapters([5, 6])
    for a, b, c in zip(first, again, other, strict=True):
        lora_a = [key for key in a if "lora_A" in key]
        assert lora_a and all(torch.equal(a[key], b[key]) for key in a)
        assert not all(torch.equal(a[key], c[key]) for key in lora_a)
    assert not all(torch.equal(first[0][key], first[1][key]) for key in first[0] if "lora_A" in key)
