"""The rollout learner base that GRPO, LLMPPO and LLMREINFORCE share: one generation,
collection, batch-tensor and evaluation path; learn_members as the population-shaped step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from agile_llm.grpo import GRPO
from agile_llm.llm_ppo import LLMPPO
from agile_llm.reinforce import LLMREINFORCE
from agile_llm.rollout import Episode, PromptAnswerEnv, RolloutHarness
from agile_llm.rollout_learner import RolloutLearner, pad_right, token_logprobs
from agile_llm.tiny import PROMPT_TEMPLATE, answer_rows, digit_reward
from tests.llm.helpers import LORA, tiny

ROOT = Path(__file__).resolve().parents[2]
SHARED = ("generate", "generator", "collect", "sample_seeds", "rollout_batch", "learn", "learn_members",
          "evaluate_episodes", "evaluate_reward", "test")
SETTINGS = {"lr": 1e-2, "batch_size": 2, "group_size": 2, "max_new_tokens": 3, "max_length": 32}


def factory(tokenizer: Any):
    rows = answer_rows()
    return lambda: RolloutHarness(PromptAnswerEnv(rows, digit_reward, prompt_template=PROMPT_TEMPLATE,
                                                  test_fraction=0.2), tokenizer, max_model_len=32)


@pytest.mark.parametrize("cls", [GRPO, LLMPPO, LLMREINFORCE])
def test_algorithms_hold_only_their_update(cls: type) -> None:
    assert issubclass(cls, RolloutLearner)
    assert "update" in cls.__dict__
    assert not any(name in cls.__dict__ for name in SHARED), "generation/collection/evaluation are shared"


def test_rollout_batch_tensors() -> None:
    model, tokenizer = tiny()
    agent = LLMREINFORCE(model, tokenizer=tokenizer, lora_config=LORA, **SETTINGS)
    episodes = agent.collect(factory(tokenizer), [1, 2])
    assert [e.prompt for e in episodes[:2]] == [episodes[0].prompt] * 2  # a group shares its prompt
    batch = agent.rollout_batch(episodes)
    ids, attention = pad_right([e.ids for e in episodes], tokenizer.pad_token_id)
    assert torch.equal(batch.ids, ids)
    for row, episode in enumerate(episodes):
        assert batch.mask[row, :len(episode.ids) - 1].tolist() == [float(m) for m in episode.mask[1:]]
        assert not batch.mask[row, len(episode.ids) - 1:].any()
    assert torch.allclose(batch.old, token_logprobs(agent.policy(training=False), ids, attention))
    with agent.base.reference_model(agent.adapter_name) as reference:
        assert torch.allclose(batch.ref, token_logprobs(reference, ids, attention))
    assert torch.equal(batch.weights, torch.ones_like(batch.old))  # Hugging Face generate: no correction
    assert batch.rewards == [e.reward for e in episodes]


def test_kl_term_is_beta_times_the_estimate_and_absent_at_beta_zero() -> None:
    model, tokenizer = tiny()
    agent = GRPO(model, tokenizer=tokenizer, lora_config=LORA, **{**SETTINGS, "beta": 0.5})
    with torch.no_grad():
        for param in agent.adapter.parameters():
            param.add_(0.05)  # away from the base, so the KL is not zero
    batch = agent.rollout_batch(agent.collect(factory(tokenizer), [1]))
    logp = batch.old.clone()
    penalty, stats = agent.kl_term(logp, batch)
    assert batch.ref is not None
    diff = batch.ref - logp
    assert torch.allclose(penalty, 0.5 * (torch.exp(diff) - diff - 1))
    assert stats["kl"] > 0
    agent.beta = 0.0
    zero = agent.rollout_batch(agent.collect(factory(tokenizer), [1]))
    assert zero.ref is None  # no reference forward
    penalty, stats = agent.kl_term(zero.old, zero)
    assert stats == {} and not penalty.any()


def test_sampling_logprobs_give_truncated_importance_weights() -> None:
    model, tokenizer = tiny()
    agent = GRPO(model, tokenizer=tokenizer, lora_config=LORA, vllm_config={"importance_sampling_cap": 1.2},
                 **SETTINGS)
    harness = factory(tokenizer)()
    harness.reset(seed=3)
    generated = [*tokenizer.encode(" 4", add_special_tokens=False), tokenizer.eos_token_id]
    from agile_llm.rollout import Completion

    harness.step(Completion(generated, [-0.1] * (len(generated) - 1) + [-30.0]))
    episode = harness.episode
    assert episode.sample_logprobs is not None and len(episode.sample_logprobs) == len(episode.ids)
    batch = agent.rollout_batch([episode])
    on = batch.mask[0].bool()
    expected = torch.exp(batch.old[0, on] - torch.tensor([-0.1] * (len(generated) - 1) + [-30.0])).clamp(max=1.2)
    assert torch.allclose(batch.weights[0, on], expected)
    assert batch.weights[0, on][-1] == pytest.approx(1.2)  # the cap
    assert torch.equal(batch.weights[0, ~on], torch.ones(int((~on).sum())))
    with pytest.raises(ValueError, match="log-probs"):
        harness.reset(seed=3)
        harness.step(Completion(generated, [-0.1]))


def test_learn_members_runs_each_members_update_in_order() -> None:
    model, tokenizer = tiny()
    members = [LLMREINFORCE(model, tokenizer=tokenizer, lora_config=LORA, index=i, **SETTINGS) for i in range(2)]
    batches = [[Episode(ids=[1, 2], mask=[0, 1], rewards=[float(i)], turn_starts=[1])] * 2 for i in range(2)]
    seen: list[tuple[int, float]] = []

    def update(self: LLMREINFORCE, episodes: list[Episode]) -> dict[str, float]:
        seen.append((self.index, episodes[0].reward))
        return {"loss": float(self.index)}

    original = LLMREINFORCE.update
    LLMREINFORCE.update = update  # type: ignore[method-assign]
    try:
        assert LLMREINFORCE.learn_members(members, batches) == [{"loss": 0.0}, {"loss": 1.0}]
        assert members[1].learn(batches[1]) == {"loss": 1.0}
    finally:
        LLMREINFORCE.update = original  # type: ignore[method-assign]
    assert seen == [(0, 0.0), (1, 1.0), (1, 1.0)]


def test_train_llm_rollout_refuses_mixed_populations() -> None:
    from agile_llm.rollout_training import train_llm_rollout

    model, tokenizer = tiny()
    pop = [GRPO(model, tokenizer=tokenizer, lora_config=LORA, **SETTINGS),
           LLMREINFORCE(model, tokenizer=tokenizer, lora_config=LORA, **SETTINGS)]
    with pytest.raises(TypeError, match="one algorithm"):
        train_llm_rollout(pop, 1, factory(tokenizer), max_steps=1, verbose=False)


@pytest.mark.parametrize(("name", "spec"), [("reinforce_tiny.yaml", "LLMREINFORCESpec"),
                                            ("llmppo_tiny.yaml", "LLMPPOSpec")])
def test_example_manifest_validates_and_agile_train_runs_it(tmp_path: Path, name: str, spec: str) -> None:
    import shutil

    from agile_cli.main import main
    from agile_core.specs.manifest import TrainingManifest
    from agile_llm import specs
    from agile_llm.tiny import write_tiny
    from tests.llm.test_grpo import register_rollout

    register_rollout()
    example = ROOT / "configs" / "training" / name
    manifest = TrainingManifest.get_validated(example)
    assert isinstance(manifest.algorithm, getattr(specs, spec))
    for klass in (getattr(specs, spec), specs.VLLMConfigSpec):
        assert all(info.description for info in klass.model_fields.values()), klass.__name__
    write_tiny(tmp_path / "llm" / "tiny")  # the example's ../llm/tiny, as configs/llm/make_tiny.py writes it
    (tmp_path / "training").mkdir()
    shutil.copy(example, tmp_path / "training" / name)
    run_dir = tmp_path / "run"
    argv = ["train", str(tmp_path / "training" / name), "--run-dir", str(run_dir), "--quiet",
            "--set", "training.max_steps=1", "--set", "training.evo_steps=1"]
    assert main(argv) == 0
    assert len(json.loads((run_dir / "summary.json").read_text())["agents"]) == 2
