"""`RunOptions`: what every training loop takes besides its env, its population and its own settings.

:class:`~agile_core.train_options.TrainOptions` (what a user sets for one run: reporting and
saving) plus the schedule (from the manifest's `training` section, :meth:`RunOptions.from_manifest`,
or from a public loop function's arguments, :meth:`RunOptions.of_call`), selection and mutation.
The checks of the step counts live here, once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agile_core.distributed.data_parallel import check_accelerator
from agile_core.train_options import TrainOptions, about, option_doc, train_signature
from agile_core.training.arguments import positive_int

if TYPE_CHECKING:
    from agile_core.hpo.mutation import Mutations
    from agile_core.hpo.protocols import SelectionStrategy
    from agile_core.specs.manifest import TrainingManifest

__all__ = ["RunOptions", "TrainOptions", "documents_run_options", "option_doc", "train_signature"]


@dataclass(frozen=True)
class RunOptions(TrainOptions):
    """The options every training loop shares: :class:`TrainOptions` plus the schedule,
    selection and mutation. Step counts are in the loop's own unit (environment steps, gradient
    steps or learning steps of one member)."""

    max_steps: int = field(default=1_000_000, metadata=about("steps per member for the whole run"))
    evo_steps: int = field(default=10_000, metadata=about("steps per member between evolutions"))
    eval_steps: int | None = field(default=None, metadata=about(
        "cap on the vector steps of an evaluation episode (None: until it ends)"))
    eval_loop: int = field(default=1, metadata=about("evaluation rounds"))
    target: float | None = field(default=None, metadata=about(
        "stop once every member's latest fitness is at least this"))
    selection: SelectionStrategy | None = field(default=None, metadata=about(
        "selection applied after each evaluation (None: none)"))
    mutation: Mutations | None = field(default=None, metadata=about("mutations applied after selection (None: none)"))
    resume_from_checkpoint: str | Path | None = field(default=None, metadata=about(
        "continue the run saved in this checkpoint (the population is replaced by the saved one)"))
    seed: int | None = field(default=None, metadata=about(
        "reseed the environment at fixed points, so seeded runs repeat and resumed runs match"))
    accelerator: Any = field(default=None, metadata=about(
        "an accelerate.Accelerator for data-parallel training over processes (None: one process)"))
    init_hp: dict[str, Any] | None = field(default=None, metadata=about(
        "initial hyperparameters (logged; CHANNELS_LAST moves image channels first)"))
    mut_p: dict[str, Any] | None = field(default=None, metadata=about("mutation parameters (logged)"))
    batch_population: bool = field(default=True, metadata=about(
        "train the population at once where the loop can (a speed switch)"))
    owner: InitVar[str] = "RunOptions"
    """Who is named in an accelerator error (the public loop function, ``LocalTrainer``); not stored."""

    def __post_init__(self, owner: str) -> None:
        super().__post_init__()
        for name in ("max_steps", "evo_steps", "eval_loop"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        if self.eval_steps is not None:
            object.__setattr__(self, "eval_steps", positive_int("eval_steps", self.eval_steps))
        check_accelerator(self.accelerator, owner)

    @classmethod
    def of_call(cls, arguments: Mapping[str, Any], owner: str, **overrides: Any) -> RunOptions:
        """The options among a public loop function's arguments (pass its ``locals()`` first thing):
        every field it has by name (``checkpoint``, the reference loops' name, for
        ``checkpoint_steps``), the selection resolved from ``selection_strategy`` and the deprecated
        ``tournament``; `overrides` set fields the function names or computes otherwise."""
        from agile_core.training.evolution import resolve_selection_strategy

        values = {option.name: arguments[option.name] for option in fields(cls) if option.name in arguments}
        if "checkpoint" in arguments:
            values["checkpoint_steps"] = arguments["checkpoint"]
        if "selection_strategy" in arguments or "tournament" in arguments:
            values["selection"] = resolve_selection_strategy(arguments.get("selection_strategy"),
                                                             arguments.get("tournament"))
        return cls(**{**values, **overrides}, owner=owner)

    @classmethod
    def from_manifest(cls, manifest: TrainingManifest, train: TrainOptions, *, selection: SelectionStrategy | None,
                      mutation: Mutations | None, accelerator: Any = None,
                      resume_from_checkpoint: str | Path | None = None) -> RunOptions:
        """The options of a manifest run: `train`'s, with the step counts, target, seed and
        checkpoint settings of its `training` section (a checkpoint option of `train` wins over
        the section's), the algorithm's hyperparameters and, when evolving, the resolved
        mutation section as logged values."""
        training = manifest.training
        evolving = bool(selection or mutation)
        # an option the manifest's `training` section also has (the checkpoint settings): the
        # section gives the default, the call wins
        given: dict[str, Any] = {option.name: getattr(train, option.name) or getattr(training, option.name, None)
                 if option.name in type(training).model_fields else getattr(train, option.name)
                 for option in TrainOptions.option_fields()}
        return cls(
            **given, max_steps=training.max_steps, evo_steps=manifest.evo_steps, eval_steps=training.eval_steps,
            eval_loop=training.eval_loop, target=training.target_score, selection=selection, mutation=mutation,
            resume_from_checkpoint=resume_from_checkpoint, seed=training.seed, accelerator=accelerator,
            init_hp=manifest.algorithm.hyperparameters(),
            mut_p=manifest.resolved_mutation().model_dump(mode="json") if evolving else None,
            batch_population=training.batch_population, owner="LocalTrainer")

    @property
    def swap_channels(self) -> bool:
        """``init_hp["CHANNELS_LAST"]``: image observations have their channels moved first."""
        return bool((self.init_hp or {}).get("CHANNELS_LAST", False))

    def logged(self) -> dict[str, Any]:
        """The options a run logs with its config (schedule, target, hyperparameters)."""
        return {"max_steps": self.max_steps, "evo_steps": self.evo_steps, "eval_steps": self.eval_steps,
                "eval_loop": self.eval_loop, "target": self.target, "init_hp": self.init_hp, "mut_p": self.mut_p}


F = TypeVar("F", bound=Callable[..., Any])

LOOP_ALIASES = {"checkpoint": "checkpoint_steps", "selection_strategy": "selection", "tournament": "selection"}
"""Parameter names of the public loop functions for :class:`RunOptions` fields of another name."""


def documents_run_options(function: F) -> F:
    """Append to a public loop function's docstring an entry for each of its parameters that is a
    :class:`RunOptions` field, with the field's help text (written once, on the field)."""
    docs = {option.name: option.metadata["doc"] for option in fields(RunOptions)}
    lines = []
    for name in inspect.signature(function).parameters:
        field_name = LOOP_ALIASES.get(name, name)
        if field_name in docs:
            text = docs[field_name] + (" (deprecated alias of selection_strategy)" if name == "tournament" else "")
            lines.append(f"    {name}: {text[0].upper()}{text[1:]}.")
    if lines:
        function.__doc__ = (inspect.cleandoc(function.__doc__ or "") + "\n\nRun options (shared by every "
                            "loop; see :class:`~agile_core.training.options.RunOptions`):\n" + "\n".join(lines))
    return function
