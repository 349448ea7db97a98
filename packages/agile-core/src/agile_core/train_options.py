"""`TrainOptions`: what a user sets for one run beyond the manifest, declared once.

Where and how a run reports and saves. ``LocalTrainer.train``'s signature and ``agile train``'s
flags are derived from these fields (:func:`train_signature`; each field's metadata holds its help
text, its metavar, whether it is a command-line flag and whether it is keyword-only); the training
loops receive them inside :class:`~agile_core.training.options.RunOptions`. This module imports
nothing heavy: the CLI builds its parser from it.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any

__all__ = ["TrainOptions", "about", "option_doc", "positive_count", "train_signature"]


def positive_count(name: str, value: Any) -> int:
    """`value` as an int, or a ValueError naming `name` when it is not an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def about(doc: str, *, metavar: str | None = None, cli: bool = True, keyword_only: bool = False) -> dict[str, Any]:
    """An option field's metadata: `doc` is its help text everywhere it appears; `cli` whether
    ``agile train`` has a flag for it; `keyword_only` for ``LocalTrainer.train``."""
    return {"doc": doc, "metavar": metavar, "cli": cli, "keyword_only": keyword_only}


@dataclass(frozen=True)
class TrainOptions:
    """What one run reports and saves: ``LocalTrainer.train``'s keywords, ``agile train``'s flags."""

    verbose: bool = field(default=True, metadata=about("progress bar and per-generation table", cli=False))
    save_elite: bool = field(default=False, metadata=about("save the best member after every evaluation"))
    elite_path: str | None = field(default=None, metadata=about(
        "where the elite is saved (default: elite)", metavar="DIR"))
    wb: bool = field(default=False, metadata=about("log to Weights & Biases"))
    tensorboard: bool = field(default=False, metadata=about("log to TensorBoard"))
    tensorboard_log_dir: str | None = field(default=None, metadata=about("TensorBoard directory", metavar="DIR"))
    checkpoint_steps: int | None = field(default=None, metadata=about(
        "save a run checkpoint every N steps per member (default: the manifest's training.checkpoint_steps, "
        "else none)", metavar="N"))
    checkpoint_path: str | None = field(default=None, metadata=about(
        "checkpoint folder (default: the manifest's training.checkpoint_path, else checkpoints); Ctrl-C also "
        "saves there", metavar="DIR"))
    overwrite_checkpoints: bool = field(default=False, metadata=about("keep only the latest checkpoint"))
    wandb_api_key: str | None = field(default=None, metadata=about(
        "W&B API key (default: $WANDB_API_KEY)", metavar="KEY"))
    wandb_kwargs: dict[str, Any] | None = field(default=None, metadata=about("extra wandb.init arguments", cli=False))
    csv_path: str | None = field(default=None, metadata=about(
        "also write every metric to this CSV file", cli=False, keyword_only=True))
    threads: int | None = field(default=None, metadata=about(
        "torch threads per process (default: $AGILE_NUM_THREADS, else what OMP_NUM_THREADS set, else 1 for "
        "RL-sized networks and the free cores for large ones)", metavar="N", keyword_only=True))
    final_checkpoint: bool = field(default=False, metadata=about(
        "also save a run checkpoint when the run ends (budget spent, target reached or out of time), so every "
        "finished run can be evaluated and continued", cli=False, keyword_only=True))

    def __post_init__(self) -> None:
        for name in ("checkpoint_steps", "threads"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, positive_count(name, getattr(self, name)))

    @classmethod
    def option_fields(cls) -> tuple[Field[Any], ...]:
        """The fields of :class:`TrainOptions` (in a subclass too: its own fields excluded)."""
        return fields(TrainOptions)

    @classmethod
    def bind(cls, args: Sequence[Any], kwargs: Mapping[str, Any]) -> TrainOptions:
        """The options of a call to a function with :func:`train_signature` (TypeError for
        arguments it does not take, as Python raises)."""
        bound = train_signature().bind(*args, **kwargs)
        return TrainOptions(**bound.arguments)


def option_doc(name: str) -> str:
    """The help text of the :class:`TrainOptions` field `name`."""
    return str(next(f for f in TrainOptions.option_fields() if f.name == name).metadata["doc"])


def train_signature(*, method: bool = False) -> inspect.Signature:
    """``LocalTrainer.train``'s signature, derived from :class:`TrainOptions`: the reference
    trainer's positional order, the later options keyword-only (with ``self`` first for a method)."""
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] if method else []
    for option in TrainOptions.option_fields():
        kind = inspect.Parameter.KEYWORD_ONLY if option.metadata["keyword_only"] else \
            inspect.Parameter.POSITIONAL_OR_KEYWORD
        parameters.append(inspect.Parameter(option.name, kind, default=option.default, annotation=option.type))
    return inspect.Signature(parameters, return_annotation="tuple[list[Any], list[float]]")


