"""LLMPPO: GAE over turns, value positions, per-token advantages, critic/actor isolation (separate
adapters and optimizers on one base), cloning and checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agile_llm.llm_ppo import LLMPPO, token_advantages, turn_gae, turn_positions
from agile_llm.rollout import Episode, PromptAnswerEnv, RolloutHarness
from agile_llm.tiny import PROMPT_TEMPLATE, answer_rows, digit_reward
from tests.llm.helpers import LORA, tiny


def agents(n: int = 1, **kwargs: Any) -> list[LLMPPO]:
    model, tokenizer = tiny()
    settings = {"lr": 1e-2, "critic_lr": 1e-2, "batch_size": 2, "group_size": 2, "max_new_tokens": 3,
                "max_length": 32, "beta": 0.04}
    settings.update(kwargs)
    return [LLMPPO(model, tokenizer=tokenizer, lora_config=LORA, index=i, seed=i, **settings) for i in range(n)]


def factory(tokenizer: Any):
    rows = answer_rows()
    return lambda: RolloutHarness(PromptAnswerEnv(rows, digit_reward, prompt_template=PROMPT_TEMPLATE,
                                                  test_fraction=0.2), tokenizer, max_model_len=32)


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def changed(before: dict[str, torch.Tensor], module: torch.nn.Module) -> bool:
    return any(not torch.equal(before[k], v) for k, v in module.state_dict().items())


def test_turn_gae_matches_hand_computation() -> None:
    adv, targets = turn_gae([0.0, 1.0], [0.5, 0.2], gamma=0.9, gae_lambda=0.8)
    # turn 2: 1 + 0 - 0.2 = 0.8; turn 1: delta = 0 + 0.9 * 0.2 - 0.5 = -0.32, plus 0.9 * 0.8 * 0.8
    assert adv == pytest.approx([-0.32 + 0.72 * 0.8, 0.8])
    assert targets == pytest.approx([-0.32 + 0.72 * 0.8 + 0.5, 1.0])


def test_turn_gae_limits_are_monte_carlo_and_one_step_td() -> None:
    rewards, values = [1.0, 0.0, 2.0], [0.3, 0.7, 0.1]
    mc, mc_targets = turn_gae(rewards, values, gamma=1.0, gae_lambda=1.0)
    assert mc == pytest.approx([3.0 - 0.3, 2.0 - 0.7, 2.0 - 0.1])  # return-to-go minus the value
    assert mc_targets == pytest.approx([3.0, 2.0, 2.0])
    td, _ = turn_gae(rewards, values, gamma=0.5, gae_lambda=0.0)
    assert td == pytest.approx([1.0 + 0.5 * 0.7 - 0.3, 0.0 + 0.5 * 0.1 - 0.7, 2.0 - 0.1])
    with pytest.raises(ValueError, match="turn values"):
        turn_gae([1.0], [0.1, 0.2], 1.0, 1.0)


def test_values_are_read_before_each_turn_and_advantages_cover_its_tokens() -> None:
    # BOS p p | g g (turn 1) | f f (feedback) | g g g (turn 2)
    episode = Episode(ids=[1, 5, 6, 7, 8, 9, 10, 11, 12, 13], mask=[0, 0, 0, 1, 1, 0, 0, 1, 1, 1],
                      rewards=[0.0, 1.0], turn_starts=[3, 7])
    assert turn_positions(episode) == [2, 6]  # last prompt token, last feedback token
    out = token_advantages([episode], torch.tensor([0.25, -1.5]), width=len(episode.ids) - 1)
    # token t is predicted at t - 1: turn 1's tokens 3, 4 at 2, 3; turn 2's tokens 7..9 at 6..8
    generated = torch.tensor(episode.mask[1:], dtype=torch.bool)
    assert out[0, generated].tolist() == [0.25, 0.25, -1.5, -1.5, -1.5]
    assert out[0, :2].tolist() == [0.0, 0.0]


def test_critic_and_actor_train_in_isolation() -> None:
    [agent] = agents()
    episodes = agent.collect(factory(agent.tokenizer), [1, 2])
    batch = agent.rollout_batch(episodes)
    rows = torch.arange(len(episodes))
    positions = torch.tensor([turn_positions(e)[0] for e in episodes])
    actor, critic = snapshot(agent.adapter), snapshot(agent.critic)

    values = agent.turn_values(batch.ids, batch.attention, rows, positions, training=True)
    agent._critic_step(((values - 1.0) ** 2).mean())
    assert changed(critic, agent.critic) and not changed(actor, agent.adapter)

    critic = snapshot(agent.critic)
    from agile_llm.rollout_learner import sequence_mean, token_logprobs

    logp = token_logprobs(agent.policy(training=True), batch.ids, batch.attention)
    agent._step(-sequence_mean(logp, batch.mask))
    assert changed(actor, agent.adapter) and not changed(critic, agent.critic)
    assert agent.critic_adapter_name != agent.adapter_name
    assert agent.base.adapters.count(agent.critic_adapter_name) == 1


def test_update_trains_both_and_values_move_towards_returns() -> None:
    [agent] = agents(update_epochs=4)
    episodes = agent.collect(factory(agent.tokenizer), [3, 4])
    for episode in episodes:  # a fixed reward makes the value target known
        episode.rewards = [1.0]
    actor, critic = snapshot(agent.adapter), snapshot(agent.critic)
    stats = agent.learn(episodes)
    assert set(stats) == {"loss", "value_loss", "kl", "reward"}
    assert changed(critic, agent.critic)
    batch = agent.rollout_batch(episodes)
    rows = torch.arange(len(episodes))
    positions = torch.tensor([turn_positions(e)[0] for e in episodes])
    values = agent.turn_values(batch.ids, batch.attention, rows, positions, training=False)
    assert float(((values - 1.0) ** 2).mean()) < 1.0  # from 0 (zero head) towards the return 1
    assert agent.learn_counter == 4
    del actor


def test_clone_and_checkpoint_keep_the_critic(tmp_path: Path) -> None:
    [agent] = agents(gamma=0.9, gae_lambda=0.7)
    agent.learn(agent.collect(factory(agent.tokenizer), [0, 1]))
    twin = agent.clone(7)
    assert twin.critic_adapter_name not in (agent.critic_adapter_name, agent.adapter_name)
    for a, b in zip(agent.critic.state_dict().values(), twin.critic.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    agent.save_checkpoint(tmp_path / "ppo")
    again = LLMPPO.load(tmp_path / "ppo")
    assert (again.gamma, again.gae_lambda, again.critic_lr, again.learn_counter) == (0.9, 0.7, 1e-2, 2)
    for a, b in zip(agent.critic.state_dict().values(), again.critic.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert again.critic_optimizer.state_dict()["state"]  # Adam moments restored


def test_bad_hyperparameters_are_refused_by_field() -> None:
    model, tokenizer = tiny()
    with pytest.raises(ValueError, match="gae_lambda"):
        LLMPPO(model, tokenizer=tokenizer, lora_config=LORA, gae_lambda=1.5)


def test_train_llm_rollout_resume_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    from agile_core.hpo.mutation import Mutations
    from agile_core.hpo.selection import TournamentSelection
    from agile_llm.rollout_training import train_llm_rollout

    pop = agents(2)
    env = factory(pop[0].tokenizer)

    def run(resume: str | None, path: str) -> tuple[list[Any], list[float]]:
        return train_llm_rollout(
            pop, 1, env, max_steps=4, evo_steps=2, verbose=False, seed=0,
            selection_strategy=TournamentSelection(2, True, 2, rng=0),
            mutation=Mutations(no_mutation=1.0, architecture=0, new_layer_prob=0, parameters=0, activation=0,
                               rl_hp=0, rand_seed=0),
            checkpoint_steps=2, checkpoint_path=str(tmp_path / path), resume_from_checkpoint=resume)

    final, fitnesses = run(None, "ck")
    checkpoints = sorted((tmp_path / "ck").glob("checkpoint_*"))
    resumed, again = run(str(checkpoints[0]), "ck2")
    assert again == pytest.approx(fitnesses)
    for a, b in zip(final, resumed, strict=True):
        for net in ("adapter", "critic"):
            for x, y in zip(getattr(a, net).state_dict().values(), getattr(b, net).state_dict().values(), strict=True):
                assert torch.allclose(x, y, atol=1e-6), net
        assert a.steps == b.steps and a.learn_counter == b.learn_counter
