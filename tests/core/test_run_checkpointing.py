"""Run checkpoints on a schedule, resuming from a folder, and the Ctrl-C guard."""

import os
import signal

import pytest

from agile_core.checkpoint import CheckpointError
from agile_core.training.checkpointing import RunCheckpointer, resolve_run_checkpoint, resume_run
from agile_core.training.interrupt import InterruptGuard, TrainingInterrupted
from tests.core.test_agent_checkpoint import ACT, OBS, TinyQ, batch


def test_checkpointer_schedule_and_resume(tmp_path):
    agents = [TinyQ(OBS, ACT, index=i, seed=i) for i in range(2)]
    checkpointer = RunCheckpointer(tmp_path / "ckpt", every=100)
    assert not checkpointer.due(0) and not checkpointer.due(99) and checkpointer.due(100)
    first = checkpointer.save(100, agents, {"generation": 1}, {"steps": 100})
    assert not checkpointer.due(150) and checkpointer.due(200)
    agents[0].learn(batch(0))
    second = checkpointer.save(200, agents, {"generation": 2}, {"steps": 200})
    assert first != second and resolve_run_checkpoint(tmp_path / "ckpt") == second
    run = resume_run(tmp_path / "ckpt")
    assert run.loop == {"steps": 200} and run.evolution == {"generation": 2}
    assert agents[0].learn(batch(1)) == run.agents[0].learn(batch(1))


def test_overwrite_mode_keeps_one_checkpoint(tmp_path):
    agents = [TinyQ(OBS, ACT)]
    checkpointer = RunCheckpointer(tmp_path, every=10, overwrite=True)
    for step in (10, 20, 30):
        checkpointer.save(step, agents, {}, {"steps": step})
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["latest"]
    assert resume_run(tmp_path).loop == {"steps": 30}


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        resolve_run_checkpoint(tmp_path)


def test_interrupt_guard_turns_first_sigint_into_a_flag():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when the suite runs in the background
    with InterruptGuard() as guard:
        os.kill(os.getpid(), signal.SIGINT)
        assert guard.requested
    assert signal.getsignal(signal.SIGINT) is before


def test_training_interrupted_is_a_keyboard_interrupt_with_a_hint(tmp_path):
    error = TrainingInterrupted(tmp_path / "ckpt", step=42)
    assert isinstance(error, KeyboardInterrupt)
    assert "--resume-from-checkpoint" in error.resume_hint("m.yaml") and "step 42" in str(error)
