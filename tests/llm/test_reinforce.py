"""LLMREINFORCE: the three baselines, the running baseline's state (checkpoints, clones), the
update and field-level errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agile_llm.reinforce import LLMREINFORCE, baseline_advantages
from agile_llm.rollout import PromptAnswerEnv, RolloutHarness
from agile_llm.tiny import PROMPT_TEMPLATE, answer_rows, digit_reward
from tests.llm.helpers import LORA, tiny


def agents(n: int = 1, **kwargs: Any) -> list[LLMREINFORCE]:
    model, tokenizer = tiny()
    settings = {"lr": 1e-2, "batch_size": 2, "group_size": 2, "max_new_tokens": 3, "max_length": 32}
    settings.update(kwargs)
    return [LLMREINFORCE(model, tokenizer=tokenizer, lora_config=LORA, index=i, seed=i, **settings) for i in range(n)]


def factory(tokenizer: Any):
    rows = answer_rows()
    return lambda: RolloutHarness(PromptAnswerEnv(rows, digit_reward, prompt_template=PROMPT_TEMPLATE,
                                                  test_fraction=0.2), tokenizer, max_model_len=32)


def test_group_baseline_is_the_leave_one_out_mean() -> None:
    adv = baseline_advantages([1.0, 0.0, 0.0, 0.5, 0.5, 0.5], "group", group_size=3)
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5, 0.0, 0.0, 0.0]))
    adv = baseline_advantages([1.0, 0.0, 0.0, 0.0], "group", group_size=4)
    assert torch.allclose(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))


def test_batch_and_running_baselines() -> None:
    assert torch.allclose(baseline_advantages([1.0, 0.0, 0.5, 0.5], "batch", 2), torch.tensor([0.5, -0.5, 0, 0]))
    assert torch.allclose(baseline_advantages([1.0, 0.0], "running", 1, running=0.25), torch.tensor([0.75, -0.25]))
    assert torch.allclose(baseline_advantages([1.0, 0.0], "running", 1, running=None), torch.tensor([0.5, -0.5]))
    with pytest.raises(ValueError, match="group_size"):
        baseline_advantages([1.0], "group", 1)


def test_running_baseline_is_updated_saved_and_cloned(tmp_path: Path) -> None:
    [agent] = agents(baseline="running", baseline_decay=0.5, group_size=1)
    env = factory(agent.tokenizer)
    first = agent.collect(env, [0, 1])
    agent.learn(first)
    mean1 = sum(e.reward for e in first) / len(first)
    assert agent.running_baseline == pytest.approx(mean1)  # the first step starts from its own mean
    second = agent.collect(env, [2, 3])
    agent.learn(second)
    mean2 = sum(e.reward for e in second) / len(second)
    assert agent.running_baseline == pytest.approx(0.5 * mean1 + 0.5 * mean2)
    agent.save_checkpoint(tmp_path / "reinforce")
    again = LLMREINFORCE.load(tmp_path / "reinforce")
    assert again.running_baseline == pytest.approx(agent.running_baseline)
    assert (again.baseline, again.baseline_decay) == ("running", 0.5)
    assert agent.clone(3).running_baseline == pytest.approx(agent.running_baseline)


def test_update_follows_the_advantage_sign() -> None:
    """One step with a positive advantage on a completion raises its log-prob (beta 0)."""
    [agent] = agents(beta=0.0, group_size=2, lr=3e-2)
    tok = agent.tokenizer
    episodes = []
    for text in (" 2", " 7"):  # two fixed completions of one prompt
        harness = factory(tok)()
        harness.reset(seed=5)
        harness.step([*tok.encode(text, add_special_tokens=False), tok.eos_token_id])
        episodes.append(harness.episode)
    episodes[0].rewards, episodes[1].rewards = [1.0], [0.0]
    before = agent.rollout_batch(episodes)
    stats = agent.learn(episodes)
    after = agent.rollout_batch(episodes)
    gain = ((after.old - before.old) * before.mask).sum(-1)
    assert gain[0] > 0 > gain[1]
    assert set(stats) == {"loss", "reward"} and agent.learn_counter == 1  # beta 0: no KL, no reference pass
    assert before.ref is None


def test_group_baseline_needs_a_group() -> None:
    model, tokenizer = tiny()
    with pytest.raises(ValueError, match="group_size"):
        LLMREINFORCE(model, tokenizer=tokenizer, lora_config=LORA, group_size=1, baseline="group")
    with pytest.raises(ValueError, match="baseline"):
        LLMREINFORCE(model, tokenizer=tokenizer, lora_config=LORA, baseline="median")
