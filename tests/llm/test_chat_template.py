"""Chat templates in the rollout harness: the transcript equals the template's rendering of the
whole conversation, the mask is 1 exactly on generated tokens, plain text is unchanged, and a
missing or rewriting template is a clear error (a manifest field error from a manifest)."""

from __future__ import annotations

from typing import Any

import pytest

from agile_llm.rollout import ChatTemplateError, RolloutHarness, run_episodes
from agile_llm.specs import LLMRolloutEnvSpec
from agile_llm.tiny import build_tokenizer
from tests.llm.test_rollout import TwoTurnEnv, fixed_generator

TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}user: {{ m['content'] }}\n"
            "{% else %}bot:{{ m['content'] }}{{ eos_token }}\n{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}bot:{% endif %}")
"""Each user turn on its own line; assistant turns close with EOS (as the policy's EOS does)."""

FORGETFUL = ("{% for m in messages %}{% if m['role'] == 'user' %}user: {{ m['content'] }}\n{% endif %}{% endfor %}"
             "{% if add_generation_prompt %}bot:{% endif %}")
"""Drops assistant turns from the rendering: a transcript cannot be extended in place."""


@pytest.fixture
def tokenizer() -> Any:
    tok = build_tokenizer()
    tok.chat_template = TEMPLATE
    return tok


def enc(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def two_turns(tokenizer: Any, first: list[int], second: list[int], **kwargs: Any) -> Any:
    harness = RolloutHarness(TwoTurnEnv(), tokenizer, max_turns=2, **kwargs)
    [episode] = run_episodes([harness], [3], fixed_generator([first, second]), max_new_tokens=8)
    return episode


def test_two_turn_transcript_is_the_rendered_conversation(tokenizer) -> None:
    eos = tokenizer.eos_token_id
    first, second = [*enc(tokenizer, " 1"), eos], [*enc(tokenizer, " 3"), eos]
    episode = two_turns(tokenizer, first, second, chat_template=True)
    conversation = [{"role": "user", "content": "pick ="}, {"role": "assistant", "content": " 1"},
                    {"role": "user", "content": " three ="}, {"role": "assistant", "content": " 3"}]
    whole = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert whole.startswith("<s>user: pick =\nbot: 1</s>\nuser:  three =\nbot: 3</s>")
    assert episode.ids == enc(tokenizer, whole.rstrip("\n"))
    # The mask is 1 exactly on the two completions, at their places in the transcript.
    prompt = enc(tokenizer, tokenizer.apply_chat_template(conversation[:1], tokenize=False, add_generation_prompt=True))
    feedback = enc(tokenizer, "\nuser:  three =\nbot:")
    assert episode.ids == prompt + first + feedback + second
    assert episode.mask == [0] * len(prompt) + [1] * len(first) + [0] * len(feedback) + [1] * len(second)
    assert episode.rewards == [0.0, 1.0] and episode.completions == [" 1", " 3"]


def test_a_turn_cut_before_eos_is_closed_by_the_template(tokenizer) -> None:
    eos = tokenizer.eos_token_id
    first, second = enc(tokenizer, " 1"), [*enc(tokenizer, " 3"), eos]  # first turn without EOS
    episode = two_turns(tokenizer, first, second, chat_template=True)
    prompt_len = len(enc(tokenizer, "<s>user: pick =\nbot:"))
    closing = enc(tokenizer, "</s>\nuser:  three =\nbot:")
    assert episode.ids[prompt_len + len(first):prompt_len + len(first) + len(closing)] == closing
    assert [t for t, m in zip(episode.ids, episode.mask, strict=True) if m] == first + second
    assert sum(episode.mask) == len(first) + len(second)


def test_plain_text_is_unchanged_when_a_template_exists(tokenizer) -> None:
    first, second = enc(tokenizer, " 1"), [*enc(tokenizer, " 3"), tokenizer.eos_token_id]
    episode = two_turns(tokenizer, first, second)
    prompt = [tokenizer.bos_token_id, *enc(tokenizer, "pick =")]
    assert episode.ids == prompt + first + enc(tokenizer, " three =") + second
    assert sum(episode.mask) == len(first) + len(second)


def test_missing_template_is_a_clear_error() -> None:
    with pytest.raises(ChatTemplateError, match="no chat template"):
        RolloutHarness(TwoTurnEnv(), build_tokenizer(), chat_template=True)


def test_a_template_that_rewrites_earlier_turns_is_refused(tokenizer) -> None:
    tokenizer.chat_template = FORGETFUL
    first, second = enc(tokenizer, " 1"), enc(tokenizer, " 3")
    with pytest.raises(ChatTemplateError, match="renders the earlier turns differently"):
        two_turns(tokenizer, first, second, chat_template=True)


def test_spec_field_and_manifest_error(tmp_path) -> None:
    from agile_core.errors import ManifestError
    from agile_llm.run import RolloutSource

    spec = LLMRolloutEnvSpec.model_validate({"entrypoint": "tests.llm.test_rollout:TwoTurnEnv", "max_turns": 2,
                                             "chat_template": True})
    assert spec.chat_template and not LLMRolloutEnvSpec.model_validate(
        {"entrypoint": "tests.llm.test_rollout:TwoTurnEnv"}).chat_template
    source = RolloutSource(spec, tmp_path)
    plain = build_tokenizer()
    source.tokenizer = plain
    with pytest.raises(ChatTemplateError):
        source.factory()
    from agile_llm import run

    with pytest.raises(ManifestError) as caught:
        run.check_chat_template(spec, plain)
    assert ("environment", "chat_template") in [tuple(issue.path) for issue in caught.value.issues]


def test_agile_train_reports_the_field_when_the_tokenizer_has_no_template(tmp_path, capsys) -> None:
    import shutil

    from agile_cli.main import main
    from agile_llm.tiny import write_tiny
    from tests.llm.test_grpo import EXAMPLE, register_rollout

    register_rollout()
    write_tiny(tmp_path / "llm" / "tiny")
    (tmp_path / "training").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "training" / EXAMPLE.name)
    argv = ["train", str(tmp_path / "training" / EXAMPLE.name), "--run-dir", str(tmp_path / "run"), "--quiet",
            "--set", "training.max_steps=1", "--set", "training.evo_steps=1", "--set", "environment.chat_template=true"]
    assert main(argv) != 0
    captured = capsys.readouterr()
    assert "environment.chat_template" in captured.out + captured.err
    assert "no chat template" in captured.out + captured.err
