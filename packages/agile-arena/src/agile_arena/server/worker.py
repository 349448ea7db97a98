"""`python -m agile_arena.server.worker JOB_DIR [--resume] [--device DEV]`: run one job.

Trains `JOB_DIR/manifest.yaml` with `LocalTrainer` into the run directory `JOB_DIR/run` with the
layout of `agile train` (docs/run-directory.md): `manifest.resolved.json`, `metrics.csv` (+ events
and history), `checkpoints/` (every `training.checkpoint_steps`, default every generation),
`elite/` and `summary.json`. `--resume` continues from the latest checkpoint in `run/checkpoints`.

The server starts it in its own session (process group) with stdout and stderr appended to
`JOB_DIR/log.txt`. SIGTERM acts like Ctrl-C for `agile train`: the loop stops at its next safe
point, saves a resumable checkpoint and the worker exits 130 (a second SIGTERM acts like a second
Ctrl-C). A killed server leaves no training behind: on Linux the kernel SIGKILLs the
worker when the server dies (PR_SET_PDEATHSIG), and on every platform a watchdog thread SIGKILLs the
worker's process group within half a second of it being re-parented.

Exit codes: 0 done, 1 training failure, 2 invalid manifest or checkpoint, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130
PARENT_PID_ENV = "AGILE_ARENA_PARENT_PID"
JOB_ENV = "AGILE_ARENA_JOB"
_PR_SET_PDEATHSIG = 1
PARENT_POLL_SECONDS = 0.5


def die_with_parent() -> None:
    """Linux: get SIGKILL when the server dies; exit now if it already has (the race before prctl);
    everywhere: watch the parent from a thread."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    expected = os.environ.get(PARENT_PID_ENV)
    if not expected:
        return
    if os.getppid() != int(expected):
        print("agile arena worker: the server is gone; not starting", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    threading.Thread(target=_watch_parent, args=(int(expected),), name="arena-parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    """Every platform: once the server is gone (this process was re-parented), SIGKILL the worker's
    whole process group (it leads its own session), so environment subprocesses go too."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os.killpg(os.getpgrp(), signal.SIGKILL)


STOP_MESSAGES = (
    "agile arena worker: stop requested: finishing the current training phase, then saving a checkpoint",
    "agile arena worker: stopping sooner: saving a checkpoint at the next step (the interrupted episode "
    "restarts on resume)",
)
"""What the log says at the server's first and second SIGTERM (the training loop's own messages speak
of Ctrl-C, which means nothing to the client's user)."""


def sigterm_as_interrupt() -> None:
    """Route SIGTERM to whatever handles SIGINT now (the training loop's interrupt guard, which saves a
    checkpoint and stops at the next safe point; before training starts, KeyboardInterrupt), with the
    loop's Ctrl-C messages replaced by STOP_MESSAGES."""
    received = 0

    def forward(signum: int, frame: Any) -> None:
        nonlocal received
        received += 1
        sys.stderr.write(f"\n{STOP_MESSAGES[min(received, len(STOP_MESSAGES)) - 1]}\n")
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):
            raise KeyboardInterrupt
        with contextlib.redirect_stderr(io.StringIO()):  # the guard's "Ctrl-C: ..." line
            handler(signal.SIGINT, frame)

    signal.signal(signal.SIGTERM, forward)


def run(job_dir: Path, resume: bool, device: str) -> int:
    """Train the job; return the exit code."""
    from agile_core.errors import ManifestError
    from agile_core.specs.manifest import validate_source
    from agile_core.yaml_source import read_manifest_file

    manifest_file = job_dir / "manifest.yaml"
    try:
        manifest = validate_source(read_manifest_file(manifest_file))
    except ManifestError as exc:
        print(exc.report(), file=sys.stderr)
        return EXIT_INVALID
    run_dir = job_dir / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_atomically(run_dir / "manifest.resolved.json", manifest.to_json() + "\n")
    checkpoints = run_dir / "checkpoints"
    training = manifest.training
    every = training.checkpoint_steps or manifest.evo_steps

    from agile_core.trainer import LocalTrainer
    from agile_core.training.checkpointing import ResumeMismatchError
    from agile_core.training.interrupt import TrainingInterrupted
    from agile_core.training.summary import build_summary

    started = time.monotonic()
    print(f"agile arena worker: {manifest.algorithm.name} on {manifest.environment.name}, "
          f"{training.max_steps} steps per agent, checkpoints every {every}"
          + (f", resuming from {checkpoints.relative_to(job_dir)}" if resume else ""), flush=True)
    try:
        trainer = LocalTrainer.from_manifest(manifest, device=device,
                                             resume_from_checkpoint=str(checkpoints) if resume else None)
        population, fitnesses = trainer.train(
            verbose=True, save_elite=True, elite_path=str(run_dir / "elite"), checkpoint_steps=every,
            checkpoint_path=str(checkpoints), overwrite_checkpoints=training.overwrite_checkpoints,
            csv_path=str(run_dir / "metrics.csv"))
    except ManifestError as exc:
        print(exc.report(), file=sys.stderr)
        return EXIT_INVALID
    except ResumeMismatchError as exc:
        print(f"agile arena worker: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except TrainingInterrupted as exc:
        saved = f"checkpoint {_relative(exc.checkpoint_path, run_dir)} saved" if exc.checkpoint_path else \
            "no checkpoint saved"
        print(f"agile arena worker: stopped at step {exc.step}; {saved}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("agile arena worker: interrupted before a checkpoint could be saved", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        print(f"agile arena worker: training failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if os.environ.get("AGILE_DEBUG"):
            import traceback

            traceback.print_exc()
        return EXIT_FAILED
    summary = build_summary(population, fitnesses, training.target_score, time.monotonic() - started)
    _write_atomically(run_dir / "summary.json", json.dumps(summary, indent=2, allow_nan=False) + "\n")
    print(f"agile arena worker: done, {summary['total_steps']} steps, best fitness {max(fitnesses):.2f} "
          f"(agent {summary['elite_id']})", flush=True)
    return EXIT_OK


def _relative(path: Path | str, run_dir: Path) -> str:
    """`path` relative to the run directory, as `agile arena download` names it (never a server path)."""
    try:
        return Path(path).resolve().relative_to(run_dir.resolve()).as_posix()
    except (ValueError, OSError):
        return Path(path).name


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m agile_arena.server.worker`."""
    die_with_parent()
    sigterm_as_interrupt()
    parser = argparse.ArgumentParser(prog="python -m agile_arena.server.worker")
    parser.add_argument("job_dir", type=Path)
    parser.add_argument("--resume", action="store_true", help="continue from run/checkpoints")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    try:
        return run(args.job_dir.resolve(), args.resume, args.device)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # every file the run wrote is closed (checkpoints fsynced); skip the interpreter's teardown, which
    # with torch loaded takes seconds on a busy machine and would hold the job's slot for nothing
    os._exit(code)
