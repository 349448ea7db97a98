"""`RunOptions`: the options every loop shares, their checks, and how a manifest fills them; every
installed paradigm trains through one `run_loop` hook."""

from __future__ import annotations

import numpy as np
import pytest

from agile_core.registry import Paradigm, paradigms
from agile_core.specs.manifest import TrainingManifest
from agile_core.training.options import RunOptions


def test_step_counts_are_checked_once_and_kept_as_ints() -> None:
    options = RunOptions(max_steps=np.int64(20), evo_steps=10, eval_steps=np.int32(5))
    assert (options.max_steps, options.eval_steps) == (20, 5)
    assert type(options.max_steps) is int and type(options.eval_steps) is int
    for name, value in (("max_steps", 0), ("evo_steps", 1.5), ("eval_loop", True), ("eval_steps", -1)):
        with pytest.raises(ValueError, match=f"{name} must be an integer >= 1, got {value!r}"):
            RunOptions(**{name: value})


def test_an_accelerator_error_names_the_loop() -> None:
    with pytest.raises(ValueError, match=r"^train_something: accelerator must be an accelerate\.Accelerator"):
        RunOptions(accelerator=object(), owner="train_something")


def test_from_manifest_reads_the_typed_sections_and_run_arguments_win() -> None:
    manifest = TrainingManifest.get_validated({
        "algorithm": {"name": "DQN"},
        "environment": {"name": "CartPole-v1"},
        "training": {"max_steps": 300, "evo_steps": 100, "eval_steps": 7, "eval_loop": 2, "target_score": 50.0,
                     "seed": 3, "checkpoint_steps": 100, "checkpoint_path": "from_manifest",
                     "batch_population": False},
    })
    options = RunOptions.from_manifest(manifest, selection=None, mutation=None, checkpoint_path="given",
                                       csv_path="metrics.csv", verbose=False)
    assert (options.max_steps, options.evo_steps, options.eval_steps, options.eval_loop) == (300, 100, 7, 2)
    assert (options.target, options.seed, options.checkpoint) == (50.0, 3, 100)
    assert options.checkpoint_path == "given" and options.csv_path == "metrics.csv" and not options.verbose
    assert options.batch_population is False and options.mut_p is None and not options.swap_channels
    assert options.init_hp == manifest.algorithm.hyperparameters()
    assert set(options.logged()) == {"max_steps", "evo_steps", "eval_steps", "eval_loop", "target", "init_hp",
                                     "mut_p"}
    evolving = RunOptions.from_manifest(manifest, selection=object(), mutation=None)  # type: ignore[arg-type]
    assert evolving.mut_p == manifest.resolved_mutation().model_dump(mode="json")
    assert evolving.checkpoint_path == "from_manifest"


def test_every_paradigm_trains_through_its_own_run_loop() -> None:
    for name, paradigm in paradigms().items():
        if name == "toy":  # the test plugin validates manifests only
            continue
        assert isinstance(paradigm, Paradigm), name
        assert type(paradigm).run_loop is not Paradigm.run_loop, name
