"""Multi-turn training: a two-turn text environment whose second reward depends on its feedback;
short LLMPPO and GRPO runs complete, the loss mask covers exactly the generated tokens (checked on
token ids) and LLMPPO reads each turn's value just before the turn."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agile_llm.grpo import GRPO
from agile_llm.llm_ppo import LLMPPO, turn_positions
from agile_llm.rollout import RolloutHarness
from agile_llm.rollout_training import train_llm_rollout
from agile_llm.tiny import WORDS
from tests.llm.helpers import LORA, tiny
from tests.llm.test_rollout import TwoTurnEnv


class HeldOutTwoTurnEnv(TwoTurnEnv):
    """TwoTurnEnv with a held-out split for evaluation (``num_test`` targets)."""

    num_test = 4


def check_masks(episodes: list[Any], targets: list[int], tokenizer: Any) -> None:
    """Rebuild each transcript from its parts (prompt, turn 1, the env's feedback for the
    episode's target, turn 2) and check the mask is 1 exactly on the two turns' tokens."""
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    prompt = [tokenizer.bos_token_id, *enc("pick =")]
    for episode, target in zip(episodes, targets, strict=True):
        feedback = enc(f" {WORDS[target]} =")
        first, second = episode.turn_starts
        assert first == len(prompt) and episode.ids[:first] == prompt
        assert episode.ids[second - len(feedback):second] == feedback
        gen1, gen2 = episode.ids[first:second - len(feedback)], episode.ids[second:]
        assert 1 <= len(gen1) <= 2 and 1 <= len(gen2) <= 2
        assert episode.mask == [0] * len(prompt) + [1] * len(gen1) + [0] * len(feedback) + [1] * len(gen2)
        assert [tokenizer.decode(g, skip_special_tokens=True) for g in (gen1, gen2)] == episode.completions
        # the second turn's reward depends on the feedback: 1 iff the answer starts with its digit
        assert episode.rewards == [0.0, float(episode.completions[1].strip()[:1] == str(target))]


@pytest.mark.parametrize("cls", [LLMPPO, GRPO])
def test_two_turn_training_runs_with_generated_only_masks(cls: type) -> None:
    model, tokenizer = tiny()
    pop = [cls(model, tokenizer=tokenizer, lora_config=LORA, lr=1e-2, batch_size=2, group_size=2, max_new_tokens=2,
               max_length=32, index=i, seed=i) for i in range(2)]

    def factory() -> RolloutHarness:
        return RolloutHarness(HeldOutTwoTurnEnv(), tokenizer, max_turns=2, max_model_len=32)

    seeds = [3, 14]
    episodes = pop[0].collect(factory, seeds)
    check_masks(episodes, [seed % 10 for seed in seeds for _ in range(2)], tokenizer)
    if cls is LLMPPO:
        for episode in episodes:
            first, second = episode.turn_starts
            assert turn_positions(episode) == [first - 1, second - 1]
            assert episode.mask[first - 1] == 0 and episode.mask[second - 1] == 0  # read before each turn
    episodes[0].rewards = [0.0, 1.0]  # make sure the step has a learning signal (the tiny model rarely scores)
    before = {k: v.detach().clone() for k, v in pop[0].adapter.state_dict().items()}
    stats = pop[0].learn(episodes)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert any(not torch.equal(before[k], v) for k, v in pop[0].adapter.state_dict().items())
    final, fitnesses = train_llm_rollout(pop, 2, factory, max_steps=2, evo_steps=1, verbose=False, seed=0)
    assert len(fitnesses) == 2 and all(0.0 <= f <= 1.0 for f in fitnesses)
    assert all(agent.steps == 2 for agent in final)
