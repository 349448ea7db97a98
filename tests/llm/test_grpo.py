"""GRPO: group advantages, one update definition for P members, log-prob agreement between
generation and training, checkpoints, train_llm_rollout (logging, wall clock, resume) and the
`llm_rollout` manifest paradigm."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from agile_llm.grpo import GRPO, group_advantages, pad_right, token_logprobs
from agile_llm.rollout import PromptAnswerEnv, RolloutHarness
from agile_llm.rollout_training import CompletionLoggingConfig, train_llm_rollout
from agile_llm.tiny import PROMPT_TEMPLATE, answer_rows, digit_reward
from tests.llm.helpers import LORA, tiny
from tests.llm.test_rollout import TwoTurnEnv

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs" / "training" / "grpo_tiny.yaml"


def register_rollout() -> None:
    """Register both LLM paradigms in this process (until the entry points are reinstalled)."""
    from agile_core.registry import register_paradigm
    from agile_llm.plugin import LLM_DATASET, LLM_ROLLOUT

    register_paradigm(LLM_DATASET)
    register_paradigm(LLM_ROLLOUT)


def make_factory(tokenizer: Any, max_model_len: int = 32):
    env = PromptAnswerEnv(answer_rows(), digit_reward, prompt_template=PROMPT_TEMPLATE, test_fraction=0.2)
    return lambda: RolloutHarness(PromptAnswerEnv(env.train_rows + env.test_rows, digit_reward,
                                                  prompt_template=PROMPT_TEMPLATE, test_fraction=0.2),
                                  tokenizer, max_model_len=max_model_len)


def agents(n: int = 1, **kwargs: Any) -> list[GRPO]:
    model, tokenizer = tiny()
    settings = {"lr": 1e-2, "batch_size": 2, "group_size": 4, "max_new_tokens": 3, "max_length": 32, "beta": 0.04}
    settings.update(kwargs)
    return [GRPO(model, tokenizer=tokenizer, lora_config=LORA, index=i, seed=i, **settings) for i in range(n)]


def test_group_advantages_are_relative_to_each_group() -> None:
    adv = group_advantages([1.0, 0.0, 0.5, 0.5, 2.0, 4.0], group_size=2)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 0.0, 0.0, -1.0, 1.0]), atol=1e-3)
    same = group_advantages([0.3] * 4, group_size=4)
    assert torch.equal(same, torch.zeros(4))  # no signal in a group of equal rewards


def test_generate_time_and_train_time_logprobs_agree() -> None:
    [agent] = agents()
    tok = agent.tokenizer
    contexts = [[tok.bos_token_id, *tok.encode(p, add_special_tokens=False)] for p in ("two =", "seven three =")]
    model = agent.policy(training=False)
    width = max(len(c) for c in contexts)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(c)) + c for c in contexts])
    mask = (torch.arange(width) >= torch.tensor([[width - len(c)] for c in contexts])).long()
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False, output_scores=True,
                         return_dict_in_generate=True, pad_token_id=tok.pad_token_id, eos_token_id=None)
    new = out.sequences[:, width:]
    gen_logp = torch.stack([torch.log_softmax(s.float(), -1).gather(-1, new[:, i:i + 1]).squeeze(-1)
                            for i, s in enumerate(out.scores)], dim=1)
    full = [c + row.tolist() for c, row in zip(contexts, new, strict=True)]
    padded, attention = pad_right(full, tok.pad_token_id)
    train_logp = token_logprobs(agent.policy(training=True), padded, attention)
    for row, c in enumerate(contexts):
        assert torch.allclose(train_logp[row, len(c) - 1:len(c) + 3], gen_logp[row], atol=1e-4)


def test_learn_is_the_one_member_case_of_learn_members() -> None:
    first, second = agents(2, update_epochs=2)
    second.adapter.load_state_dict({k: v.detach().clone() for k, v in first.adapter.state_dict().items()})
    factory = make_factory(first.tokenizer)
    torch.manual_seed(0)
    episodes = first.collect(factory, [1, 2])
    first.learn(episodes)
    GRPO.learn_members([second], [episodes])
    for (name, a), b in zip(first.adapter.state_dict().items(), second.adapter.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name
    assert first.learn_counter == second.learn_counter == 2


def test_multi_turn_rollout_and_update_run_end_to_end() -> None:
    [agent] = agents(group_size=2, max_new_tokens=2)
    before = {k: v.detach().clone() for k, v in agent.adapter.state_dict().items()}
    factory = lambda: RolloutHarness(TwoTurnEnv(), agent.tokenizer, max_turns=2, max_model_len=32)  # noqa: E731
    episodes = agent.collect(factory, [3, 4])
    assert len(episodes) == 4 and all(len(e.completions) == 2 for e in episodes)
    for episode in episodes:  # generated tokens of both turns are trained, the feedback is not
        feedback = agent.tokenizer.encode(f" {['three', 'four'][episodes.index(episode) // 2]} =",
                                          add_special_tokens=False)
        start = len(episode.ids) - sum(episode.mask) - len(feedback)
        assert any(episode.ids[i:i + len(feedback)] == feedback and not any(episode.mask[i:i + len(feedback)])
                   for i in range(start, len(episode.ids)))
    stats = agent.learn(episodes)
    assert set(stats) == {"loss", "kl", "reward"}
    assert any(not torch.equal(before[k], v) for k, v in agent.adapter.state_dict().items()) or \
        len({e.reward for e in episodes[:2]}) == len({e.reward for e in episodes[2:]}) == 1


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    [agent] = agents(beta=0.2, clip_coef=0.3)
    factory = make_factory(agent.tokenizer)
    agent.learn(agent.collect(factory, [0, 1]))
    agent.save_checkpoint(tmp_path / "grpo")
    again = GRPO.load(tmp_path / "grpo")
    assert again.base is agent.base and again.adapter_name != agent.adapter_name
    assert (again.beta, again.clip_coef, again.group_size, again.learn_counter) == (0.2, 0.3, 4, 1)
    for a, b in zip(agent.adapter.state_dict().values(), again.adapter.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert again.evaluate_reward(factory) == agent.evaluate_reward(factory)


def test_train_llm_rollout_logs_completions_checkpoints_and_resumes(tmp_path: Path) -> None:
    from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
    from agile_core.hpo.mutation import Mutations
    from agile_core.hpo.selection import TournamentSelection

    hp = HyperparameterConfig(lr=RLParameter(name="lr", min=3e-3, max=3e-2))
    pop = agents(2, hp_config=hp)
    factory = make_factory(pop[0].tokenizer)

    def run(resume: str | None = None, path: str = "ck") -> tuple[list[Any], list[float]]:
        return train_llm_rollout(
            pop, 1, factory, max_steps=4, evo_steps=2, verbose=False, seed=0,
            selection_strategy=TournamentSelection(2, True, 2, rng=0),
            mutation=Mutations(no_mutation=0.5, architecture=0, new_layer_prob=0, parameters=0, activation=0,
                               rl_hp=0.5, rand_seed=0),
            checkpoint_steps=2, checkpoint_path=str(tmp_path / path), max_reward=1.0,
            completion_logging=CompletionLoggingConfig(jsonl_path=str(tmp_path / "c.jsonl"), num_samples=1),
            resume_from_checkpoint=resume)

    final, fitnesses = run()
    assert len(fitnesses) == 2 and all(0.0 <= f <= 1.0 for f in fitnesses)
    records = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert len(records) == 4 and {"prompt", "completions", "reward", "accuracy"} <= set(records[0])
    checkpoints = sorted((tmp_path / "ck").glob("checkpoint_*"))
    assert len(checkpoints) == 2
    resumed, again = run(str(checkpoints[0]), "ck2")
    assert again == pytest.approx(fitnesses)
    for a, b in zip(final, resumed, strict=True):
        for x, y in zip(a.adapter.state_dict().values(), b.adapter.state_dict().values(), strict=True):
            assert torch.allclose(x, y, atol=1e-6)
        assert a.steps == b.steps


def test_max_wall_seconds_stops_after_the_first_generation() -> None:
    pop = agents(1)
    factory = make_factory(pop[0].tokenizer)
    pop, fitnesses = train_llm_rollout(pop, 1, factory, max_steps=1000, evaluation_interval=2, verbose=False,
                                       max_wall_seconds=0.0)
    assert len(fitnesses) == 1 and pop[0].steps == 0


def test_manifest_validates_and_agile_train_runs_it(tmp_path: Path) -> None:
    register_rollout()
    from agile_cli.main import main
    from agile_core.specs.manifest import TrainingManifest
    from agile_llm.specs import GRPOSpec, LLMRolloutEnvSpec
    from agile_llm.tiny import write_tiny

    manifest = TrainingManifest.get_validated(EXAMPLE)
    assert isinstance(manifest.environment, LLMRolloutEnvSpec) and isinstance(manifest.algorithm, GRPOSpec)
    for spec in (GRPOSpec, LLMRolloutEnvSpec):
        assert all(info.description for info in spec.model_fields.values()), spec.__name__
    write_tiny(tmp_path / "llm" / "tiny")
    (tmp_path / "training").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "training" / EXAMPLE.name)
    run_dir = tmp_path / "run"
    argv = ["train", str(tmp_path / "training" / EXAMPLE.name), "--run-dir", str(run_dir), "--quiet",
            "--set", "training.max_steps=2", "--set", "training.evo_steps=1", "--checkpoint-steps", "1"]
    assert main(argv) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["agents"]) == 2
    checkpoints = sorted((run_dir / "checkpoints").glob("checkpoint_*"))
    assert main([*argv, "--run-dir", str(run_dir) + "-resumed", "--resume-from-checkpoint",
                 str(checkpoints[0])]) == 0


@pytest.mark.parametrize(("environment", "where"), [
    ({"dataset": "x.jsonl"}, "reward_file_path"),
    ({"dataset": "x.jsonl", "entrypoint": "m:E", "reward_file_path": "r.py"}, "dataset"),
    ({"entrypoint": "m:E", "max_turns": 0}, "max_turns"),
])
def test_bad_rollout_fields_are_reported_with_their_path(environment: dict, where: str) -> None:
    register_rollout()
    from pydantic import ValidationError

    from agile_core.errors import ManifestError
    from agile_core.specs.manifest import TrainingManifest

    data = {"algorithm": {"name": "GRPO"}, "environment": environment,
            "network": {"pretrained_model_name_or_path": "m"}}
    with pytest.raises((ManifestError, ValidationError), match=where):
        TrainingManifest.get_validated(data)
