"""Rollouts of text environments as one continuous token transcript per episode.

A text environment has ``reset(seed=None, options=None) -> str`` (the first observation, the
prompt) and ``step(text) -> (observation | None, reward, terminated, truncated, info)``.
:class:`RolloutHarness` wraps one such environment for one episode: it keeps the transcript
(prompt tokens, generated tokens, tokenised feedback, in order) and a mask that is 1 exactly on
policy-generated tokens (the only ones trained), stops after ``max_turns`` or when the next turn
could not fit in ``max_model_len`` tokens (``truncated``), and gives every environment call at
most ``io_timeout_s`` seconds (``TimeoutError``).

Observations are plain text by default (BOS, then the prompt; feedback tokenised as is). With
``chat_template=True`` the conversation is rendered through ``tokenizer.apply_chat_template``:
the first observation is a user message followed by the generation prompt, each completion an
assistant message and each later observation another user message. Each new piece of the
transcript is the text difference between the rendered conversation with and without it (so
the ids stay one continuous sequence: earlier tokens, generated ones included, are never
re-tokenised); a template that renders earlier turns differently once later ones are added is
refused with :class:`ChatTemplateError`.

Constructors: :class:`PromptAnswerEnv` (single turn: rows of ``{prompt, answer}`` scored by
``reward_fn(completion, answer, prompt) -> float``) and :func:`load_env_factory` (a multi-turn
environment class or factory named ``"module:attr"``). :func:`load_reward_fn` loads a reward
function from a file (``reward_file_path`` + ``reward_fn_name``) or a module (``"pkg.mod"``).
"""

from __future__ import annotations

import concurrent.futures
import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["ChatTemplateError", "Completion", "Episode", "PromptAnswerEnv", "RolloutHarness", "TextEnv", "load_env_factory",
           "load_reward_fn", "run_episodes"]

RewardFn = Callable[[str, str, str], float]


class TextEnv(Protocol):
    """What the harness drives."""

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> str: ...

    def step(self, text: str) -> tuple[str | None, float, bool, bool, dict[str, Any]]: ...


@dataclass
class Episode:
    """One finished (or running) episode: the transcript and what the environment returned."""

    ids: list[int] = field(default_factory=list)
    """Every token of the transcript, in order."""
    mask: list[int] = field(default_factory=list)
    """1 on policy-generated tokens, 0 on prompt and environment feedback."""
    rewards: list[float] = field(default_factory=list)
    """Reward of each turn."""
    completions: list[str] = field(default_factory=list)
    """Decoded completion of each turn."""
    turn_starts: list[int] = field(default_factory=list)
    """Index in ``ids`` of the first generated token of each turn (the turn's tokens run to the
    next feedback; the token before it is the last one of the context the turn answered)."""
    sample_logprobs: list[float] | None = None
    """Log-prob of each token under the sampler that generated it, aligned with ``ids`` (0 on
    prompt and feedback), when the generation backend reports them (vLLM); None otherwise."""
    prompt: str = ""
    """The first observation."""
    terminated: bool = False
    truncated: bool = False
    done: bool = False

    @property
    def reward(self) -> float:
        """The episode's return (sum of turn rewards)."""
        return float(sum(self.rewards))


@dataclass
class Completion:
    """One turn's generated tokens and, when the backend reports them, their sampling log-probs."""

    ids: list[int]
    """Generated token ids (up to and including EOS)."""
    logprobs: list[float] | None = None
    """Log-prob of each generated token under the sampler (same length as ``ids``), or None."""


class ChatTemplateError(ValueError):
    """The tokenizer has no chat template, or its template cannot extend a transcript in place."""


def _template_name(tokenizer: Any) -> str:
    """How errors name a tokenizer's chat template: its tokenizer and the template's opening."""
    template = str(getattr(tokenizer, "chat_template", "") or "")
    opening = template[:60].replace("\n", " ") + ("..." if len(template) > 60 else "")
    return f"the chat template of {getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__} ({opening!r})"


def require_chat_template(tokenizer: Any) -> None:
    """ChatTemplateError unless `tokenizer` has a chat template to render conversations with."""
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(
            f"the tokenizer {getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__} has no chat "
            "template (tokenizer.chat_template is unset): use chat_template: false (plain text) or a tokenizer "
            "that ships one")


def _call(timeout: float | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args)` with a deadline: TimeoutError after `timeout` seconds (None: no deadline).
    The worker thread of a hung call is abandoned (Python cannot kill a thread)."""
    if timeout is None:
        return fn(*args, **kwargs)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        future = pool.submit(fn, *args, **kwargs)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError as error:
            raise TimeoutError(f"environment call {getattr(fn, '__name__', fn)} took longer than "
                               f"io_timeout_s={timeout} s") from error
    finally:
        pool.shutdown(wait=False)


class RolloutHarness:
    """Drives one text environment through one episode at a time (see the module docstring).

    Args:
        env: The text environment.
        tokenizer: Tokenizer of the policy; the prompt gets BOS first when the tokenizer has one.
        max_turns: Policy turns per episode at most.
        max_model_len: Longest transcript in tokens (None: unlimited).
        io_timeout_s: Deadline of each ``reset``/``step`` call (None: none).
        chat_template: Render the conversation through the tokenizer's chat template (see the
            module docstring) instead of plain text; the template then decides about BOS.
    """

    def __init__(self, env: TextEnv, tokenizer: Any, *, max_turns: int = 1, max_model_len: int | None = None,
                 io_timeout_s: float | None = 600.0, chat_template: bool = False) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if chat_template:
            require_chat_template(tokenizer)
        self.chat_template = bool(chat_template)
        self.messages: list[dict[str, str]] = []
        """The conversation so far (chat template only)."""
        self._rendered = ""
        """The rendered conversation the transcript holds so far (chat template only)."""
        self.env = env
        self.tokenizer = tokenizer
        self.max_turns = int(max_turns)
        self.max_model_len = max_model_len
        self.io_timeout_s = io_timeout_s
        self.episode = Episode()
        self.turns = 0

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> list[int]:
        """Start an episode; the prompt's token ids (the transcript so far)."""
        obs = _call(self.io_timeout_s, self.env.reset, seed=seed, options=options)
        if isinstance(obs, tuple):  # (obs, info) as gymnasium does
            obs = obs[0]
        if self.chat_template:
            self.messages = [{"role": "user", "content": str(obs)}]
            self._rendered = self._render(self.messages)
            ids = self._encode(self._rendered)
        else:
            bos = self.tokenizer.bos_token_id
            ids = ([bos] if bos is not None else []) + self._encode(str(obs))
        self.episode = Episode(ids=list(ids), mask=[0] * len(ids), prompt=str(obs))
        self.turns = 0
        if self.max_model_len is not None and len(ids) >= self.max_model_len:
            self.episode.truncated = self.episode.done = True
        return list(ids)

    def _render(self, messages: list[dict[str, str]]) -> str:
        return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    def _chat_feedback(self, completion_ids: list[int], completion: str, obs: str) -> str:
        """The text the transcript needs after the completion so that it reads as the rendered
        conversation with the completion (assistant) and `obs` (user) added."""
        messages = [*self.messages, {"role": "assistant", "content": completion}, {"role": "user", "content": obs}]
        rendered = self._render(messages)
        head = self._rendered + completion
        if not rendered.startswith(head):
            raise ChatTemplateError(
                f"{_template_name(self.tokenizer)} renders the earlier turns differently once a new one is added "
                "(e.g. it drops or rewrites past assistant messages), so the transcript cannot stay one continuous "
                "token sequence: use chat_template: false or a template that only appends")
        rest = rendered[len(head):]
        eos, eos_id = self.tokenizer.eos_token, self.tokenizer.eos_token_id
        if completion_ids and eos_id is not None and completion_ids[-1] == eos_id and eos and rest.startswith(eos):
            rest = rest[len(eos):]  # the generated EOS already closes the turn as the template does
        self.messages, self._rendered = messages, rendered
        return rest

    def room(self) -> int | None:
        """Tokens the policy may still generate before the transcript reaches ``max_model_len``."""
        return None if self.max_model_len is None else self.max_model_len - len(self.episode.ids)

    def step(self, completion_ids: Sequence[int] | Completion,
             logprobs: Sequence[float] | None = None) -> tuple[list[int] | None, float, bool, bool, dict[str, Any]]:
        """Append the policy's tokens (and their sampling log-probs when given), pass their text
        to the environment and append its tokenised feedback; (feedback ids or None when the
        episode ended, reward, terminated, truncated, info)."""
        if self.episode.done:
            raise RuntimeError("step() after the episode ended: call reset()")
        if isinstance(completion_ids, Completion):
            logprobs = completion_ids.logprobs
            completion_ids = completion_ids.ids
        ep = self.episode
        completion_ids = [int(t) for t in completion_ids]
        if logprobs is not None:
            if len(logprobs) != len(completion_ids):
                raise ValueError(f"{len(logprobs)} log-probs for {len(completion_ids)} generated tokens")
            if ep.sample_logprobs is None:
                ep.sample_logprobs = [0.0] * len(ep.ids)
            ep.sample_logprobs.extend(float(x) for x in logprobs)
        elif ep.sample_logprobs is not None:
            raise ValueError("this episode's earlier turns carried sampling log-probs; this one has none")
        ep.turn_starts.append(len(ep.ids))
        ep.ids.extend(completion_ids)
        ep.mask.extend([1] * len(completion_ids))
        text = self.tokenizer.decode(completion_ids, skip_special_tokens=True)
        ep.completions.append(text)
        obs, reward, terminated, truncated, info = _call(self.io_timeout_s, self.env.step, text)
        self.turns += 1
        ep.rewards.append(float(reward))
        feedback: list[int] | None = None
        if not (terminated or truncated) and obs is not None and self.turns < self.max_turns:
            feedback = self._encode(self._chat_feedback(completion_ids, text, str(obs)) if self.chat_template
                                    else str(obs))
            # The feedback plus at least one generated token must fit.
            if self.max_model_len is not None and len(ep.ids) + len(feedback) + 1 > self.max_model_len:
                truncated, feedback = True, None
            else:
                ep.ids.extend(feedback)
                ep.mask.extend([0] * len(feedback))
                if ep.sample_logprobs is not None:
                    ep.sample_logprobs.extend([0.0] * len(feedback))
        elif not (terminated or truncated):
            truncated = True  # max_turns reached or no further observation
        ep.terminated, ep.truncated = bool(terminated), bool(truncated)
        ep.done = feedback is None
        return feedback, float(reward), bool(terminated), bool(truncated), dict(info or {})


def run_episodes(harnesses: Sequence[RolloutHarness], seeds: Sequence[int | None],
                 generate: Callable[[list[list[int]], int], Sequence[list[int] | Completion]], max_new_tokens: int,
                 options: Mapping[str, Any] | None = None) -> list[Episode]:
    """Run one episode in each harness in lockstep: every turn, `generate(contexts,
    max_new_tokens)` continues the transcripts of the running episodes (one batch; token lists,
    or :class:`Completion` objects carrying sampling log-probs), then each environment steps.
    An episode whose transcript is full ends with ``truncated``."""
    for harness, seed in zip(harnesses, seeds, strict=True):
        harness.reset(seed=seed, options=options)
    while True:
        running = [h for h in harnesses if not h.episode.done]
        if not running:
            break
        budget = max_new_tokens
        for h in running:
            room = h.room()
            if room is not None:
                budget = min(budget, room)
        if budget <= 0:
            for h in running:
                h.episode.truncated = h.episode.done = True
            continue
        outputs = generate([list(h.episode.ids) for h in running], budget)
        for h, out in zip(running, outputs, strict=True):
            h.step(out)
    return [h.episode for h in harnesses]


class PromptAnswerEnv:
    """Single-turn environment: ``reset`` picks a row (train or test split, by seed), ``step``
    scores the completion with ``reward_fn(completion, answer, prompt)`` and terminates.

    Args:
        rows: ``{prompt_column: ..., answer_column: ...}`` dicts.
        reward_fn: The scorer.
        prompt_template: Format string with ``{prompt}`` (None: the prompt as is).
        test_fraction: Share of rows held out (``options={"split": "test"}``).
        split_seed: Seed of the deterministic split.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], reward_fn: RewardFn, *, prompt_template: str | None = None,
                 test_fraction: float = 0.1, split_seed: int = 0, prompt_column: str = "prompt",
                 answer_column: str = "answer") -> None:
        rows = [dict(r) for r in rows]
        if len(rows) < 2:
            raise ValueError("PromptAnswerEnv needs at least two rows (one per split)")
        for i, row in enumerate(rows):
            if prompt_column not in row or answer_column not in row:
                raise ValueError(f"row {i} lacks {prompt_column!r} or {answer_column!r}")
        order = np.random.default_rng(split_seed).permutation(len(rows))
        n_test = min(max(1, round(test_fraction * len(rows))), len(rows) - 1)
        self.test_rows = [rows[i] for i in order[:n_test]]
        self.train_rows = [rows[i] for i in order[n_test:]]
        self.reward_fn = reward_fn
        self.prompt_template = prompt_template
        self.prompt_column, self.answer_column = prompt_column, answer_column
        self.row: dict[str, Any] | None = None

    @property
    def num_test(self) -> int:
        """Held-out rows (one evaluation episode each)."""
        return len(self.test_rows)

    def prompt_text(self, row: Mapping[str, Any]) -> str:
        prompt = str(row[self.prompt_column])
        return prompt if self.prompt_template is None else self.prompt_template.format(**{**row, "prompt": prompt})

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> str:
        split = (options or {}).get("split", "train")
        rows = self.test_rows if split == "test" else self.train_rows
        index = int(seed or 0) % len(rows)
        self.row = rows[index]
        return self.prompt_text(self.row)

    def step(self, text: str) -> tuple[str | None, float, bool, bool, dict[str, Any]]:
        if self.row is None:
            raise RuntimeError("step() before reset()")
        row = self.row
        reward = float(self.reward_fn(text, str(row[self.answer_column]), self.prompt_text(row)))
        return None, reward, True, False, {"answer": row[self.answer_column]}


def _load_attr(spec: str, base_dir: str | Path | None = None) -> Any:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"expected 'module:attribute', got {spec!r}")
    return getattr(_import(module_name, base_dir), attr)


def _import(name_or_file: str, base_dir: str | Path | None) -> Any:
    if name_or_file.endswith(".py"):
        path = Path(name_or_file)
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        if not path.is_file():
            raise FileNotFoundError(f"reward file {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"_agile_reward_{abs(hash(str(path.resolve())))}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(name_or_file)


class MissingRewardFunction(AttributeError):
    """The reward file or module loads but has no function of the name asked for."""


def load_reward_fn(reward_file_path: str, reward_fn_name: str, base_dir: str | Path | None = None) -> RewardFn:
    """The function `reward_fn_name` of `reward_file_path`: a ``.py`` file (relative to
    `base_dir`) or an importable module name (e.g. ``agile_llm.tiny``)."""
    fn = getattr(_import(reward_file_path, base_dir), reward_fn_name, None)
    if not callable(fn):
        raise MissingRewardFunction(f"{reward_file_path} has no function {reward_fn_name!r}")
    return fn  # type: ignore[no-any-return,unused-ignore]


def load_env_factory(entrypoint: str, base_dir: str | Path | None = None, **kwargs: Any) -> Callable[[], TextEnv]:
    """A zero-argument factory of the multi-turn environment named ``"module:attr"`` (a class
    or a function; ``module`` may be a ``.py`` file), called with `kwargs`."""
    target = _load_attr(entrypoint, base_dir)
    return lambda: target(**kwargs)  # type: ignore[no-any-return,unused-ignore]
