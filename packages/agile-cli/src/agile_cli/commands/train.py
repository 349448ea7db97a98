"""`agile train MANIFEST`: train a population from a manifest into a run directory."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from agile_core.cli_types import device, non_negative_float, positive_float, positive_int

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def register(sub: Any) -> None:
    """Add the `train` subcommand."""
    parser = sub.add_parser(
        "train",
        help="train a population from a manifest",
        description="Train a population of agents from a YAML/JSON manifest. Exit codes: 0 done, "
                    "1 training failure, 2 invalid manifest or usage, 130 interrupted (after saving a "
                    "resumable checkpoint).",
    )
    parser.add_argument("manifest", metavar="MANIFEST", help="training manifest (YAML or JSON)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a manifest field, e.g. --set training.pop_size=2 (repeatable)")
    parser.add_argument("--device", type=device, default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--seed", type=int, help="seed for environments, networks and evolution")
    parser.add_argument("--run-dir", metavar="DIR", help="run directory (default: runs/<manifest>-<timestamp>)")
    parser.add_argument("--resume-from-checkpoint", metavar="PATH", help="continue an interrupted run")
    parser.add_argument("--load-weights-from", metavar="PATH", help="start a new run from saved weights")
    _add_train_option_flags(parser)
    parser.add_argument("--profile", action="store_true",
                        help="time env stepping, acting, sampling, learning, evaluation, evolution, checkpoints and "
                             "logging; print the table and write RUN_DIR/profile.json")
    distributed = parser.add_argument_group("distributed training (see docs/distributed.md)")
    distributed.add_argument("--backend", choices=("local", "ray"), default="local",
                             help="where members train: this process (default) or Ray actors (needs agile-core[ray])")
    distributed.add_argument("--address", metavar="ADDR",
                             help="Ray cluster to attach to (e.g. auto, HOST:6379, ray://HOST:10001); default: start "
                                  "a local Ray instance for the run")
    distributed.add_argument("--ray-workers", type=positive_int, metavar="N",
                             help="Ray worker actors (default: one per member, as many as the CPUs allow)")
    distributed.add_argument("--ray-cpus-per-worker", type=positive_float, default=1.0, metavar="C",
                             help="CPUs each Ray worker reserves (default: 1)")
    distributed.add_argument("--ray-gpus-per-worker", type=non_negative_float, default=0.0, metavar="G",
                             help="GPUs each Ray worker reserves (default: 0; needed for --device cuda)")
    distributed.add_argument("--ray-num-cpus", type=positive_int, metavar="N",
                             help="CPUs of the local Ray instance (default: all; not with --address)")
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("--verbose", dest="verbose", action="store_true", default=True,
                           help="progress bar and per-generation table (default)")
    verbosity.add_argument("--quiet", dest="verbose", action="store_false", help="print only the result")
    parser.set_defaults(handler=run)


RUN_DIR_DEFAULTS = {"elite_path": "RUN_DIR/elite", "tensorboard_log_dir": "RUN_DIR/tensorboard",
                    "checkpoint_path": "RUN_DIR/checkpoints"}
"""Where `agile train` puts what a run saves when no flag says otherwise."""


def _add_train_option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per command-line option of :class:`~agile_core.training.options.TrainOptions`
    (its name in kebab case, its help text): a switch for a boolean, a value otherwise."""
    from agile_core.train_options import TrainOptions

    for option in TrainOptions.option_fields():
        if not option.metadata["cli"]:
            continue
        flag, text = "--" + option.name.replace("_", "-"), str(option.metadata["doc"])
        if option.name in RUN_DIR_DEFAULTS:
            text = text.split(" (default")[0] + f" (default: {RUN_DIR_DEFAULTS[option.name]})"
        if option.default is False:
            parser.add_argument(flag, action="store_true", help=text)
        elif "int" in str(option.type):
            parser.add_argument(flag, type=positive_int, metavar=option.metadata["metavar"], help=text)
        else:
            parser.add_argument(flag, metavar=option.metadata["metavar"], help=text)


def _load_manifest(args: argparse.Namespace) -> Any:
    from agile_core.overrides import apply_overrides
    from agile_core.specs.manifest import validate_source
    from agile_core.yaml_source import read_manifest_file

    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"training.seed={args.seed}")
    manifest = validate_source(apply_overrides(read_manifest_file(args.manifest), overrides), emit_warnings=False)
    for note in manifest.warnings:
        print(note.format(args.manifest, severity="warning"), file=sys.stderr)
    return manifest


def _run_dir(args: argparse.Namespace) -> Path:
    if args.run_dir:
        return Path(args.run_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{Path(args.manifest).stem}-{stamp}"


_DEFAULTS: dict[str, Any] = {"device": "cpu", "backend": "local", "ray_cpus_per_worker": 1.0,
                             "ray_gpus_per_worker": 0.0}
"""Flags left out of the resume command when they have these (default) values."""


def _resume_hint(exc: Any, args: argparse.Namespace, run_dir: Path) -> str:
    """The command that continues an interrupted run: same manifest, overrides and run directory
    (so metrics.csv and metrics.history.jsonl carry on)."""
    import shlex

    if exc.checkpoint_path is None:
        return str(exc.resume_hint(args.manifest))
    launcher = ["uv", "run"] if os.environ.get("UV_RUN_RECURSION_DEPTH") else []  # started by `uv run agile ...`
    words = [*launcher, "agile", "train", args.manifest]
    for override in args.overrides:
        words += ["--set", override]
    for flag in ("seed", "device", "checkpoint_steps", "checkpoint_path", "elite_path", "tensorboard_log_dir",
                 "backend", "address", "ray_workers", "ray_cpus_per_worker", "ray_gpus_per_worker", "ray_num_cpus"):
        value = getattr(args, flag, None)
        if value is not None and value != _DEFAULTS.get(flag):
            words += [f"--{flag.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    for flag in ("overwrite_checkpoints", "save_elite", "tensorboard", "wb"):
        if getattr(args, flag):
            words.append(f"--{flag.replace('_', '-')}")
    if not args.verbose:
        words.append("--quiet")
    words += ["--run-dir", str(run_dir), "--resume-from-checkpoint", str(exc.checkpoint_path)]
    return shlex.join(words)


def _backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """`LocalTrainer` keywords for the chosen backend (BackendError for contradictory flags)."""
    from agile_core.distributed import BackendError, RayOptions

    ray_flags = [flag for flag, value, default in (
        ("--address", args.address, None), ("--ray-workers", args.ray_workers, None),
        ("--ray-cpus-per-worker", args.ray_cpus_per_worker, 1.0),
        ("--ray-gpus-per-worker", args.ray_gpus_per_worker, 0.0), ("--ray-num-cpus", args.ray_num_cpus, None),
    ) if value != default]
    if args.backend != "ray":
        if ray_flags:
            raise BackendError(f"{', '.join(ray_flags)}: only used with --backend ray")
        return {}
    options = RayOptions(address=args.address, workers=args.ray_workers, cpus_per_worker=args.ray_cpus_per_worker,
                         gpus_per_worker=args.ray_gpus_per_worker, num_cpus=args.ray_num_cpus)
    return {"backend": "ray", "ray_options": options}


def _data_parallel_options(args: argparse.Namespace, backend: dict[str, Any]) -> dict[str, Any]:
    """``{"accelerator": ...}`` when started as several processes (``accelerate launch``,
    ``torchrun``: ``WORLD_SIZE`` above 1), else nothing; BackendError when that cannot work."""
    from agile_core.distributed import BackendError

    try:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        world_size = 1
    if world_size <= 1:
        return {}
    if backend:
        raise BackendError(f"started as {world_size} processes (WORLD_SIZE) with --backend ray: use one or the other")
    try:
        from accelerate import Accelerator
    except ImportError as exc:
        raise BackendError(f"started as {world_size} processes (WORLD_SIZE), which trains data-parallel with "
                           "Hugging Face Accelerate, but it is not installed: pip install accelerate") from exc
    try:
        return {"accelerator": Accelerator(cpu=args.device == "cpu")}
    except (ValueError, RuntimeError) as exc:  # e.g. no MASTER_ADDR: not started by a launcher
        raise BackendError(f"started as {world_size} processes (WORLD_SIZE={world_size}), but the data-parallel "
                           f"group cannot start: {str(exc).strip().splitlines()[0]}. Start the processes with "
                           "`accelerate launch` or `torchrun`, which set MASTER_ADDR, MASTER_PORT and RANK; "
                           "or unset WORLD_SIZE to train in one process") from exc


def run(args: argparse.Namespace) -> int:
    """Validate, train, write the run directory; map outcomes to exit codes."""
    from agile_core.distributed import BackendError
    from agile_core.errors import ManifestError

    if args.resume_from_checkpoint and args.load_weights_from:
        print("agile train: --resume-from-checkpoint and --load-weights-from are mutually exclusive", file=sys.stderr)
        return EXIT_USAGE
    try:
        backend = _backend_options(args)
        backend.update(_data_parallel_options(args, backend))
    except BackendError as exc:
        print(f"agile train: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        manifest = _load_manifest(args)
    except ManifestError as exc:
        print(exc.report(), file=sys.stderr)
        return EXIT_USAGE
    if args.wandb_api_key:
        _hide_from_argv(args.wandb_api_key)
    run_dir = _run_dir(args)
    accelerator = backend.get("accelerator")
    main = accelerator is None or accelerator.is_main_process  # data-parallel: one process writes
    from agile_core.training.run_lock import RunDirectoryBusy, run_directory_lock

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with run_directory_lock(run_dir) if main else nullcontext():
            if main:
                (run_dir / "manifest.resolved.json").write_text(manifest.to_json() + "\n", encoding="utf-8")
            return _train(args, manifest, backend, run_dir, main)
    except RunDirectoryBusy as exc:
        print(f"agile train: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"agile train: cannot use run directory {run_dir}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if accelerator is not None:
            from agile_core.distributed.data_parallel import close_process_group

            close_process_group(accelerator)


def _train(args: argparse.Namespace, manifest: Any, backend: dict[str, Any], run_dir: Path, main: bool) -> int:
    """Train into `run_dir` (locked by the caller) and write its summary; the exit code."""
    from agile_core.distributed import BackendError
    from agile_core.errors import ManifestError

    checkpoint_path = args.checkpoint_path or manifest.training.checkpoint_path or str(run_dir / "checkpoints")
    elite_path = args.elite_path or str(run_dir / "elite")
    from agile_core.checkpoint import CheckpointError
    from agile_core.training.checkpointing import ResumeMismatchError
    from agile_core.training.interrupt import TrainingInterrupted
    from agile_core.training.summary import build_summary

    started = time.monotonic()
    from agile_core.training.profiling import PROFILER

    try:
        from agile_core.trainer import LocalTrainer

        trainer = LocalTrainer.from_manifest(manifest, device=args.device,
                                             resume_from_checkpoint=args.resume_from_checkpoint,
                                             load_weights_from=args.load_weights_from, **backend)
        with PROFILER.run() if args.profile else nullcontext():
            population, fitnesses = trainer.train(**_train_options(args, run_dir, checkpoint_path, elite_path))
    except ManifestError as exc:  # a manifest problem only found when building the run (exit 2, no traceback)
        print(ManifestError(exc.issues, args.manifest).report(), file=sys.stderr)
        return EXIT_USAGE
    except BackendError as exc:  # a backend that cannot run this manifest here (not installed, unsupported)
        print(f"agile train: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ResumeMismatchError as exc:  # resuming with another run's checkpoint: the user's input (exit 2)
        print(f"agile train: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CheckpointError as exc:  # a damaged or foreign checkpoint given to resume or warm-start from
        verb = "resume from" if args.resume_from_checkpoint else "load weights from" if args.load_weights_from \
            else "use"
        print(f"agile train: cannot {verb} checkpoint {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TrainingInterrupted as exc:
        print(f"\nInterrupted: {exc}\nResume with: {_resume_hint(exc, args, run_dir)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("\nInterrupted before a checkpoint could be saved.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a training failure: concise message, traceback on request
        print(f"agile train: training failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if os.environ.get("AGILE_DEBUG"):
            traceback.print_exc()
        else:
            print("(set AGILE_DEBUG=1 for the full traceback)", file=sys.stderr)
        return EXIT_FAILED
    if not main:
        return EXIT_OK
    summary = build_summary(population, fitnesses, manifest.training.target_score, time.monotonic() - started)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    if args.profile:
        (run_dir / "profile.json").write_text(json.dumps(PROFILER.summary(), indent=2) + "\n", encoding="utf-8")
        print(f"where the time went (profile.json):\n{PROFILER.table()}")
    print(f"run directory: {run_dir}\nsummary: {run_dir / 'summary.json'}\n"
          f"best fitness {max(fitnesses):.2f} (agent {summary['elite_id']}), "
          f"{summary['total_steps']} steps of the whole population at {summary['steps_per_second']:.0f} steps/s")
    if summary.get("target_reached"):
        print(f"stopped: target score {manifest.training.target_score} reached at step "
              f"{summary.get('target_reached_at_step')}")
    else:
        print(f"stopped: step budget spent ({manifest.training.max_steps} steps per agent)")
    if args.save_elite:
        print(f"elite saved to {elite_path}")
    return EXIT_OK


def _train_options(args: argparse.Namespace, run_dir: Path, checkpoint_path: str, elite_path: str) -> dict[str, Any]:
    """``LocalTrainer.train``'s keywords: the flags, with the run directory's paths as defaults,
    metrics in RUN_DIR/metrics.csv and a checkpoint at the end of every run."""
    from agile_core.train_options import TrainOptions

    options = {option.name: getattr(args, option.name) for option in TrainOptions.option_fields()
               if option.metadata["cli"]}
    options.update(verbose=args.verbose, elite_path=elite_path, checkpoint_path=checkpoint_path,
                   tensorboard_log_dir=args.tensorboard_log_dir or str(run_dir / "tensorboard"),
                   wandb_api_key=args.wandb_api_key or os.environ.get("WANDB_API_KEY"),
                   wandb_kwargs={"dir": str(run_dir)} if args.wb else None,
                   csv_path=str(run_dir / "metrics.csv"), final_checkpoint=True)
    return options


def _hide_from_argv(secret: str) -> None:
    """Replace `secret` in ``sys.argv`` (W&B records the command line in its run files)."""
    sys.argv[:] = [arg.replace(secret, "***") for arg in sys.argv]
