"""The rollout harness: one continuous transcript, a mask on generated tokens only, max_turns,
max_model_len truncation, io timeouts, reward loading."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agile_llm.rollout import (
    PromptAnswerEnv,
    RolloutHarness,
    load_env_factory,
    load_reward_fn,
    run_episodes,
)
from agile_llm.tiny import WORDS, build_tokenizer


class TwoTurnEnv:
    """Turn 1: any answer; the env then names a number word ("seven ="). Turn 2: reward 1 when
    the completion starts with that word's digit. The second reward depends on the feedback."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.target = 0
        self.turn = 0

    def reset(self, seed: int | None = None, options: Any = None) -> str:
        time.sleep(self.delay)
        self.target = int(seed or 0) % 10
        self.turn = 0
        return "pick ="

    def step(self, text: str) -> tuple[str | None, float, bool, bool, dict]:
        self.turn += 1
        if self.turn == 1:
            return f" {WORDS[self.target]} =", 0.0, False, False, {}
        return None, float(text.strip()[:1] == str(self.target)), True, False, {}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tokenizer()


def fixed_generator(outputs: list[list[int]]):
    calls = iter(outputs)

    def generate(contexts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        out = next(calls)
        return [out[:max_new_tokens] for _ in contexts]
    return generate


def test_mask_covers_exactly_the_generated_tokens_over_two_turns(tokenizer) -> None:
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    first, second = enc(" 1"), [*enc(" 3"), tokenizer.eos_token_id]
    harness = RolloutHarness(TwoTurnEnv(), tokenizer, max_turns=2)
    [episode] = run_episodes([harness], [3], fixed_generator([first, second]), max_new_tokens=8)
    prompt = [tokenizer.bos_token_id, *enc("pick =")]
    feedback = enc(" three =")
    assert episode.ids == prompt + first + feedback + second
    assert [t for t, m in zip(episode.ids, episode.mask, strict=True) if m] == first + second
    assert episode.mask == [0] * len(prompt) + [1] * len(first) + [0] * len(feedback) + [1] * len(second)
    assert episode.rewards == [0.0, 1.0] and episode.terminated and not episode.truncated
    assert episode.completions == [" 1", " 3"]


def test_second_turn_reward_depends_on_the_feedback(tokenizer) -> None:
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    harnesses = [RolloutHarness(TwoTurnEnv(), tokenizer, max_turns=2) for _ in range(2)]
    episodes = run_episodes(harnesses, [3, 4], fixed_generator([enc(" 0"), enc(" 3")]), max_new_tokens=4)
    assert [e.reward for e in episodes] == [1.0, 0.0]


def test_max_turns_stops_with_truncated(tokenizer) -> None:
    harness = RolloutHarness(TwoTurnEnv(), tokenizer, max_turns=1)
    [episode] = run_episodes([harness], [0], fixed_generator([[5, 6]]), max_new_tokens=4)
    assert episode.truncated and not episode.terminated and len(episode.rewards) == 1
    assert sum(episode.mask) == 2


def test_transcript_never_exceeds_max_model_len(tokenizer) -> None:
    prompt_len = 1 + len(tokenizer.encode("pick =", add_special_tokens=False))
    harness = RolloutHarness(TwoTurnEnv(), tokenizer, max_turns=2, max_model_len=prompt_len + 3)
    [episode] = run_episodes([harness], [7], fixed_generator([[5, 6, 7, 8], [9]]), max_new_tokens=4)
    # Generation was cut to the room left; the feedback did not fit: truncated after turn 1.
    assert episode.ids[prompt_len:] == [5, 6, 7] and episode.truncated and len(episode.rewards) == 1
    assert len(episode.ids) <= prompt_len + 3


def test_slow_environment_raises_timeout(tokenizer) -> None:
    harness = RolloutHarness(TwoTurnEnv(delay=2.0), tokenizer, io_timeout_s=0.1)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="io_timeout_s"):
        harness.reset(seed=0)
    assert time.monotonic() - started < 1.5


def test_prompt_answer_env_splits_and_scores(tokenizer) -> None:
    rows = [{"prompt": f"q{i}", "answer": str(i)} for i in range(10)]
    env = PromptAnswerEnv(rows, lambda c, a, p: float(c.strip() == a), prompt_template="{prompt} =",
                          test_fraction=0.2)
    assert env.num_test == 2 and len(env.train_rows) == 8
    test_prompts = {env.reset(seed=i, options={"split": "test"}) for i in range(2)}
    train_prompts = {env.reset(seed=i) for i in range(8)}
    assert not test_prompts & train_prompts
    env.reset(seed=0)
    answer = env.row["answer"]
    assert env.step(f" {answer} ")[1:3] == (1.0, True)


def test_reward_and_env_loading(tmp_path: Path) -> None:
    (tmp_path / "rewards.py").write_text("def exact(c, a, p):\n    return float(c == a)\n")
    assert load_reward_fn("rewards.py", "exact", base_dir=tmp_path)("x", "x", "") == 1.0
    assert load_reward_fn("agile_llm.tiny", "digit_reward")(" 2 7", "2 7", "") == 1.0
    with pytest.raises(AttributeError, match="nope"):
        load_reward_fn("agile_llm.tiny", "nope")
    (tmp_path / "envs.py").write_text(
        "class E:\n    def __init__(self, n=1):\n        self.n = n\n")
    make = load_env_factory("envs.py:E", base_dir=tmp_path, n=3)
    assert make().n == 3 and make() is not make()
