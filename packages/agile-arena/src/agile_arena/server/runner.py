"""The scheduler: starts queued jobs while slots are free, watches their workers, stops, resumes,
and recovers after a crash or a restart.

Everything runs on the server's event loop thread (one loop task polls the workers), so the store
and the table of running workers are never changed concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import time
from pathlib import Path

from agile_arena.server import procs
from agile_arena.server.sandbox import Sandbox, folder_over_quota
from agile_arena.server.store import TERMINAL, Job, Store, now_iso
from agile_arena.server.worker import EXIT_INTERRUPTED, EXIT_INVALID

logger = logging.getLogger("uvicorn.error")
POLL_SECONDS = 0.2
QUOTA_SECONDS = 5.0
RESUMABLE = frozenset({"stopped", "interrupted", "failed"})


class ResumeRefused(ValueError):
    """The job cannot be resumed (its status, or no checkpoint)."""


def has_checkpoint(run_dir: Path) -> bool:
    """Whether `run_dir/checkpoints` holds a complete checkpoint (a non-hidden folder with its
    `manifest.json`: checkpoints are written to a hidden name and renamed when whole). The worker
    verifies it fully when it resumes."""
    root = run_dir / "checkpoints"
    try:
        entries = list(root.iterdir())
    except OSError:
        return False
    return any(not e.name.startswith(".") and e.is_dir() and (e / "manifest.json").is_file() for e in entries)


class Runner:
    """At most `slots` workers at a time; the rest of the queue waits in `queued_at` order."""

    def __init__(self, store: Store, data_dir: Path, slots: int, device: str = "cpu",
                 stop_grace: float = 20.0, sandbox: Sandbox | None = None) -> None:
        self.store = store
        self.sandbox = sandbox if sandbox is not None else Sandbox.disabled()
        self.jobs_dir = data_dir / "jobs"
        self.slots = slots
        self.device = device
        self.stop_grace = stop_grace
        self.closing = False
        self._ended = False
        self._workers: dict[str, subprocess.Popen[bytes]] = {}
        self._kill_at: dict[str, float] = {}
        self._hurry_at: dict[str, float] = {}
        self._stopping: set[str] = set()
        self._slot_of: dict[str, int] = {}
        self._quota_at: dict[str, float] = {}
        self._over_quota: dict[str, int] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def job_dir(self, job_id: str) -> Path:
        """`DATA_DIR/jobs/<job_id>`."""
        return self.jobs_dir / job_id

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        """Recover from the previous server, then start the scheduling loop."""
        self.recover()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._loop(), name="arena-runner")

    def recover(self) -> None:
        """Jobs the store says are running belong to a server that is gone: kill what is left of
        their workers and mark them `interrupted` (resumable when a checkpoint exists)."""
        for job in self.store.with_status("running"):
            killed = procs.kill_orphans(job.id)
            resumable = has_checkpoint(self.job_dir(job.id) / "run")
            reason = "the server stopped while the job ran; " + (
                "POST resume to continue from its last checkpoint" if resumable else "no checkpoint was saved")
            self.store.mark_finished(job.id, "interrupted", None, reason)
            self._note(job.id, f"interrupted: {reason}" + (f" ({killed} leftover processes killed)" if killed else ""))

    async def shutdown(self) -> None:
        """Server shutdown: stop every worker as `stop` does (each saves a checkpoint; SIGKILL after the
        grace period) and mark them `interrupted`."""
        self.closing = True
        self._ended = True
        if self._task is not None:  # no cancel(): asyncio.wait_for of 3.11 can swallow it
            self.wake()
            await self._task
        now = time.monotonic()
        for job_id, worker in self._workers.items():
            self._signal(job_id, worker, signal.SIGTERM)
            self._hurry_at[job_id] = now + self.stop_grace / 2
            self._kill_at[job_id] = now + self.stop_grace
        deadline = now + self.stop_grace + 10
        while self._workers and time.monotonic() < deadline:
            self._reap()
            await asyncio.sleep(POLL_SECONDS)

    def wake(self) -> None:
        """Ask the loop to look at the queue now."""
        if self._wake is not None:
            self._wake.set()

    async def _loop(self) -> None:
        assert self._wake is not None
        while not self._ended:
            try:
                self._reap()
                self._fill_slots()
            except Exception:  # keep scheduling: one bad step (a full disk, a locked store) is logged
                logger.exception("arena scheduler step failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
            self._wake.clear()

    # ------------------------------------------------------------------ starting and reaping
    def _fill_slots(self) -> None:
        if self.closing:
            return
        for job in self.store.with_status("queued"):
            if len(self._workers) >= self.slots:
                return
            self._start(job)

    def _start(self, job: Job) -> None:
        job_dir = self.job_dir(job.id)
        self._note(job.id, "starting" + (" (resuming from the last checkpoint)" if job.resume else ""))
        self._note(job.id, self.sandbox.describe())
        slot = min(set(range(self.slots)) - set(self._slot_of.values()))
        try:
            worker = procs.start_worker(job.id, job_dir, job.resume, self.device, self.sandbox, slot)
        except OSError as exc:
            self.store.mark_finished(job.id, "failed", None, f"cannot start the worker: {exc.strerror or exc}")
            return
        self._workers[job.id] = worker
        self._slot_of[job.id] = slot
        self._quota_at[job.id] = time.monotonic() + QUOTA_SECONDS
        self.store.mark_running(job.id, worker.pid)

    def _signal(self, job_id: str, worker: subprocess.Popen[bytes], signum: int) -> None:
        procs.signal_job(job_id, worker.pid, signum, self.sandbox.enabled)

    def _check_quota(self, job_id: str, worker: subprocess.Popen[bytes], now: float) -> None:
        """Every few seconds: SIGKILL a job whose folder outgrew the disk limit."""
        if now < self._quota_at.get(job_id, 0.0) or job_id in self._over_quota:
            return
        self._quota_at[job_id] = now + QUOTA_SECONDS
        size = folder_over_quota(self.job_dir(job_id), self.sandbox.limits.disk_bytes)
        if size is not None:
            self._over_quota[job_id] = size
            procs.signal_group(worker.pid, signal.SIGKILL)

    def _reap(self) -> None:
        now = time.monotonic()
        for job_id, worker in list(self._workers.items()):
            code = worker.poll()
            if code is None:
                self._check_quota(job_id, worker, now)
                if job_id in self._hurry_at and now >= self._hurry_at[job_id]:
                    self._signal(job_id, worker, signal.SIGTERM)  # second SIGTERM: stop at the next step
                    del self._hurry_at[job_id]
                if job_id in self._kill_at and now >= self._kill_at[job_id]:
                    procs.signal_group(worker.pid, signal.SIGKILL)
                    del self._kill_at[job_id]
                continue
            procs.signal_group(worker.pid, signal.SIGKILL)  # anything the worker left in its group
            del self._workers[job_id]
            self._kill_at.pop(job_id, None)
            self._hurry_at.pop(job_id, None)
            self._slot_of.pop(job_id, None)
            self._quota_at.pop(job_id, None)
            status, error = self._outcome(job_id, code)
            self._over_quota.pop(job_id, None)
            self._stopping.discard(job_id)
            self.store.mark_finished(job_id, status, code, error)
            self._note(job_id, f"{status} (exit code {code})" + (f": {error}" if error else ""))

    def _outcome(self, job_id: str, code: int) -> tuple[str, str | None]:
        if job_id in self._stopping:
            return "stopped", None
        if job_id in self._over_quota:
            return "failed", (f"the job folder grew to {self._over_quota[job_id]} bytes, past the server's "
                              f"limit of {self.sandbox.limits.disk_bytes} bytes")
        if code == 0:
            return "completed", None
        if self.closing:
            return "interrupted", "the server shut down while the job ran; POST resume to continue"
        if code == EXIT_INVALID:
            return "failed", "invalid manifest or checkpoint: " + self._last_log_line(job_id)
        if code == EXIT_INTERRUPTED:
            return "failed", "the worker was interrupted: " + self._last_log_line(job_id)
        if code < 0 or code > 128:
            return "failed", self._killed_by(-code if code < 0 else code - 128)
        return "failed", self._last_log_line(job_id) or f"the worker exited with code {code}"

    # ------------------------------------------------------------------ requests
    async def stop(self, job_id: str) -> None:
        """Stop a job: a queued one at once; a running one with SIGTERM (the loop checkpoints when the
        current phase ends), a second SIGTERM halfway through the grace period (checkpoint at the next
        step), SIGKILL at its end. Returns when the worker is gone. Finished jobs are left alone."""
        job = self.store.get(job_id)
        if job is None or job.status in TERMINAL:
            return
        worker = self._workers.get(job_id)
        if job.status == "queued" or worker is None:
            self.store.mark_finished(job_id, "stopped", None, None)
            self._note(job_id, "stopped before it started" if job.status == "queued" else "stopped")
            return
        if job_id not in self._stopping:
            self._stopping.add(job_id)
            self._kill_at[job_id] = time.monotonic() + self.stop_grace
            self._hurry_at[job_id] = time.monotonic() + self.stop_grace / 2
            self._note(job_id, "stop requested: SIGTERM sent")
            self._signal(job_id, worker, signal.SIGTERM)
        while job_id in self._workers:
            await asyncio.sleep(POLL_SECONDS / 2)
            self._reap()
        self.wake()

    def resume(self, job_id: str) -> None:
        """Queue a stopped, interrupted or failed job again, to continue from its last checkpoint."""
        job = self.store.get(job_id)
        if job is None:
            raise ResumeRefused("no such job")
        if job.status not in RESUMABLE:
            raise ResumeRefused(f"only stopped, interrupted or failed jobs can be resumed; this one is {job.status}")
        if not has_checkpoint(self.job_dir(job_id) / "run"):
            raise ResumeRefused("the job has no checkpoint to resume from")
        self.store.requeue(job_id, resume=True)
        self._note(job_id, "resume requested: queued")
        self.wake()

    def counts(self) -> tuple[int, int]:
        """(running, queued) jobs."""
        return self.store.count("running"), self.store.count("queued")

    def _killed_by(self, signum: int) -> str:
        """Why a worker died of signal `signum`, naming the sandbox limit when one explains it."""
        limits = self.sandbox.limits
        if signum == signal.SIGXCPU and limits.cpu_seconds is not None:
            return f"the job used up its CPU time limit ({limits.cpu_seconds} CPU seconds per process)"
        if signum == signal.SIGXFSZ and limits.file_bytes is not None:
            return f"the job wrote a file larger than the limit of {limits.file_bytes} bytes"
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = str(signum)
        return f"the worker was killed by signal {signum} ({name})"

    # ------------------------------------------------------------------ the job log
    def _note(self, job_id: str, text: str) -> None:
        """Append a server line to the job's log.txt."""
        with contextlib.suppress(OSError), open(self.job_dir(job_id) / "log.txt", "ab") as log:
            log.write(f"[arena {now_iso()}] {text}\n".encode())

    def _last_log_line(self, job_id: str) -> str:
        """The last worker line of the log (the error message of a failed run), at most 300 chars."""
        try:
            with open(self.job_dir(job_id) / "log.txt", "rb") as log:
                log.seek(0, 2)
                size = log.tell()
                log.seek(max(0, size - 8192))
                tail = log.read().decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [line.strip() for line in tail.replace("\r", "\n").splitlines()]
        lines = [line for line in lines if line and not line.startswith("[arena ")]
        return lines[-1][:300] if lines else ""
