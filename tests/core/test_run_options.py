"""`RunOptions`: the options every loop shares, their checks, and how a manifest fills them;
`TrainOptions`, the one declaration of `LocalTrainer.train`'s keywords and `agile train`'s flags;
every installed paradigm trains through its own `run_loop`."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from agile_core.registry import Paradigm, paradigms
from agile_core.specs.manifest import TrainingManifest
from agile_core.trainer import LocalTrainer
from agile_core.training.options import RunOptions, TrainOptions, train_signature


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
    train = TrainOptions(checkpoint_path="given", csv_path="metrics.csv", verbose=False)
    options = RunOptions.from_manifest(manifest, train, selection=None, mutation=None)
    assert (options.max_steps, options.evo_steps, options.eval_steps, options.eval_loop) == (300, 100, 7, 2)
    assert (options.target, options.seed, options.checkpoint_steps) == (50.0, 3, 100)
    assert options.checkpoint_path == "given" and options.csv_path == "metrics.csv" and not options.verbose
    assert options.batch_population is False and options.mut_p is None and not options.swap_channels
    assert options.init_hp == manifest.algorithm.hyperparameters()
    assert set(options.logged()) == {"max_steps", "evo_steps", "eval_steps", "eval_loop", "target", "init_hp",
                                     "mut_p"}
    evolving = RunOptions.from_manifest(manifest, TrainOptions(), selection=object(),  # type: ignore[arg-type]
                                        mutation=None)
    assert evolving.mut_p == manifest.resolved_mutation().model_dump(mode="json")
    assert evolving.checkpoint_path == "from_manifest"


def test_every_paradigm_trains_through_its_own_run_loop() -> None:
    for name, paradigm in paradigms().items():
        if name == "toy":  # the test plugin validates manifests only
            continue
        assert isinstance(paradigm, Paradigm), name
        assert type(paradigm).run_loop is not Paradigm.run_loop, name


def test_local_trainer_train_takes_exactly_the_train_options_in_the_reference_order() -> None:
    signature = inspect.signature(LocalTrainer.train)
    names = [name for name in signature.parameters if name != "self"]
    assert names == [option.name for option in TrainOptions.option_fields()]
    assert names[:11] == ["verbose", "save_elite", "elite_path", "wb", "tensorboard", "tensorboard_log_dir",
                          "checkpoint_steps", "checkpoint_path", "overwrite_checkpoints", "wandb_api_key",
                          "wandb_kwargs"]
    assert all(signature.parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in names[11:])


def test_train_options_bind_like_a_python_call_and_check_their_counts() -> None:
    options = TrainOptions.bind((False, True), {"threads": 2})
    assert (options.verbose, options.save_elite, options.threads) == (False, True, 2)
    with pytest.raises(TypeError):
        TrainOptions.bind((), {"no_such_option": 1})
    with pytest.raises(TypeError):
        TrainOptions.bind((False,) * 12, {})  # csv_path and later are keyword-only
    with pytest.raises(ValueError, match="checkpoint_steps must be an integer >= 1, got 0"):
        TrainOptions.bind((), {"checkpoint_steps": 0})
    assert str(train_signature()).startswith("(verbose: 'bool' = True, save_elite: 'bool' = False")


def test_a_loop_functions_checkpoint_argument_is_the_checkpoint_interval() -> None:
    options = RunOptions.of_call({"checkpoint": 50, "max_steps": 100, "verbose": False}, "train_something")
    assert (options.checkpoint_steps, options.max_steps, options.verbose) == (50, 100, False)
