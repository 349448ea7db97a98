"""`RunOptions`: what every training loop takes besides its env, its population and its own settings.

The public loop functions (``train_off_policy``, ``train_on_policy``...) keep their long argument
lists and build a `RunOptions` from them; ``LocalTrainer`` builds one from the manifest's typed
sections (:meth:`RunOptions.from_manifest`) and hands it to the paradigm's ``run_loop`` hook. The
checks of the step counts live here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import InitVar, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agile_core.distributed.data_parallel import check_accelerator
from agile_core.training.arguments import positive_int

if TYPE_CHECKING:
    from agile_core.hpo.mutation import Mutations
    from agile_core.hpo.protocols import SelectionStrategy
    from agile_core.specs.manifest import TrainingManifest

__all__ = ["RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """The options every training loop shares. Step counts are in the loop's own unit
    (environment steps, gradient steps or learning steps of one member)."""

    max_steps: int = 1_000_000
    """Steps per member for the whole run."""
    evo_steps: int = 10_000
    """Steps per member between evolutions."""
    eval_steps: int | None = None
    """Cap on the vector steps of an evaluation episode (None: until it ends)."""
    eval_loop: int = 1
    """Evaluation rounds."""
    target: float | None = None
    """Stop once every member's latest fitness is at least this."""
    selection: SelectionStrategy | None = None
    """Selection applied after each evaluation (None: no selection)."""
    mutation: Mutations | None = None
    """Mutations applied after selection (None: no mutation)."""
    checkpoint: int | None = None
    """Save a run checkpoint every this many steps per member (None: no periodic checkpoints)."""
    checkpoint_path: str | None = None
    """Folder for checkpoints (None: ``checkpoints``); Ctrl-C also saves there."""
    final_checkpoint: bool = False
    """Also save a run checkpoint when the run ends (budget spent, target reached or out of
    time), with or without periodic ones, so every finished run can be evaluated and continued
    (``agile train`` sets it)."""
    overwrite_checkpoints: bool = False
    """Keep only the latest checkpoint."""
    save_elite: bool = False
    """Save the best member after every evaluation to `elite_path`."""
    elite_path: str | None = None
    """Where the elite is saved (None: ``elite``)."""
    wb: bool = False
    """Log to Weights & Biases."""
    tensorboard: bool = False
    """Log to TensorBoard."""
    tensorboard_log_dir: str | None = None
    """TensorBoard directory."""
    verbose: bool = True
    """Progress bar and per-generation table."""
    wandb_api_key: str | None = None
    """W&B API key (else ``WANDB_API_KEY``)."""
    wandb_kwargs: dict[str, Any] | None = None
    """Extra ``wandb.init`` arguments."""
    csv_path: str | None = None
    """Also write every metric to this CSV file."""
    resume_from_checkpoint: str | Path | None = None
    """Continue the run saved in this checkpoint (the population is replaced by the saved one)."""
    seed: int | None = None
    """Reseed the environment at fixed points, so seeded runs repeat and resumed runs match."""
    accelerator: Any = None
    """An ``accelerate.Accelerator`` for data-parallel training over processes (None: one process)."""
    init_hp: dict[str, Any] | None = None
    """Initial hyperparameters (logged; ``CHANNELS_LAST`` moves image channels first)."""
    mut_p: dict[str, Any] | None = None
    """Mutation parameters (logged)."""
    batch_population: bool = True
    """Train the population at once where the loop can (a speed switch; loops without it ignore it)."""
    owner: InitVar[str] = "RunOptions"
    """Who is named in an accelerator error (the public loop function, ``LocalTrainer``); not stored."""

    def __post_init__(self, owner: str) -> None:
        for name in ("max_steps", "evo_steps", "eval_loop"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        if self.eval_steps is not None:
            object.__setattr__(self, "eval_steps", positive_int("eval_steps", self.eval_steps))
        check_accelerator(self.accelerator, owner)

    @classmethod
    def of_call(cls, arguments: Mapping[str, Any], owner: str, **overrides: Any) -> RunOptions:
        """The options among a public loop function's arguments (pass its ``locals()`` first thing):
        every field it has by name, the selection resolved from ``selection_strategy`` and the
        deprecated ``tournament``; `overrides` set fields the function names or computes otherwise."""
        from agile_core.training.evolution import resolve_selection_strategy

        values = {field.name: arguments[field.name] for field in fields(cls) if field.name in arguments}
        if "selection_strategy" in arguments or "tournament" in arguments:
            values["selection"] = resolve_selection_strategy(arguments.get("selection_strategy"),
                                                             arguments.get("tournament"))
        return cls(**{**values, **overrides}, owner=owner)

    @classmethod
    def from_manifest(cls, manifest: TrainingManifest, *, selection: SelectionStrategy | None,
                      mutation: Mutations | None, accelerator: Any = None,
                      resume_from_checkpoint: str | Path | None = None, verbose: bool = True,
                      save_elite: bool = False, elite_path: str | None = None, wb: bool = False,
                      tensorboard: bool = False, tensorboard_log_dir: str | None = None,
                      checkpoint_steps: int | None = None, checkpoint_path: str | None = None,
                      overwrite_checkpoints: bool = False, wandb_api_key: str | None = None,
                      wandb_kwargs: dict[str, Any] | None = None, csv_path: str | None = None,
                      final_checkpoint: bool = False) -> RunOptions:
        """The options of a manifest run: the step counts, target, seed and checkpoint settings of
        its `training` section (a run argument given here wins over the section's), the
        algorithm's hyperparameters and, when evolving, the resolved mutation section as logged
        values; the keyword arguments are ``LocalTrainer.train``'s."""
        training = manifest.training
        evolving = bool(selection or mutation)
        return cls(
            max_steps=training.max_steps, evo_steps=manifest.evo_steps, eval_steps=training.eval_steps,
            eval_loop=training.eval_loop, target=training.target_score, selection=selection, mutation=mutation,
            checkpoint=checkpoint_steps or training.checkpoint_steps,
            checkpoint_path=checkpoint_path or training.checkpoint_path, final_checkpoint=final_checkpoint,
            overwrite_checkpoints=overwrite_checkpoints or training.overwrite_checkpoints, save_elite=save_elite,
            elite_path=elite_path, wb=wb, tensorboard=tensorboard, tensorboard_log_dir=tensorboard_log_dir,
            verbose=verbose, wandb_api_key=wandb_api_key, wandb_kwargs=wandb_kwargs, csv_path=csv_path,
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
