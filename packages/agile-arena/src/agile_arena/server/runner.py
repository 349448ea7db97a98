"""The scheduler: starts queued jobs while slots are free, watches their workers, stops, resumes,
and recovers after a crash or a restart.

Everything runs on the server's event loop thread (one loop task polls the workers), so the store
and the table of running workers are never changed concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

from agile_arena.server import files, procs
from agile_arena.server.logs import hide_paths, job_replacements
from agile_arena.server.sandbox import Sandbox, folder_over_quota
from agile_arena.server.store import TERMINAL, Job, Store, now_iso
from agile_arena.server.worker import EXIT_INTERRUPTED, EXIT_INVALID

logger = logging.getLogger("uvicorn.error")
POLL_SECONDS = 0.2
QUOTA_SECONDS = 5.0
RESUMABLE = frozenset({"stopped", "interrupted", "failed"})


class ResumeRefused(ValueError):
    """The job cannot be resumed (its status, or no checkpoint)."""


class DeleteRefused(ValueError):
    """The job is queued or running: stop it first."""


TRASH_PREFIX = ".deleted-"
"""Job folders being deleted are renamed `jobs/.deleted-<id>-<random>` first (gone at once for the
API; removed in the background, or at the next start should the server die meanwhile)."""


def resume_hint(job_id: str) -> str:
    """What a client user runs to continue a job."""
    return f"`agile arena resume {job_id}` continues it from its last checkpoint"


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
        self.remove_trash()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._loop(), name="arena-runner")

    def recover(self) -> None:
        """Jobs the store says are running belong to a server that is gone: kill what is left of
        their workers and mark them `interrupted` (resumable when a checkpoint exists)."""
        for job in self.store.with_status("running"):
            killed = procs.kill_orphans(job.id)
            reason = "the server stopped while the job ran; " + self._how_to_continue(job.id)
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
            self.store.mark_finished(job.id, "failed", None, f"the server could not start the job: {exc.strerror or exc}")
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
            return "interrupted", "the server shut down while the job ran; " + self._how_to_continue(job_id)
        if code == EXIT_INVALID:
            return "failed", "invalid manifest or checkpoint: " + self._last_log_line(job_id)
        if code == EXIT_INTERRUPTED:
            return "failed", "the job was interrupted: " + self._last_log_line(job_id)
        if code < 0 or code > 128:
            return "failed", self._killed_by(-code if code < 0 else code - 128)
        return "failed", self._last_log_line(job_id) or f"the job exited with code {code}"

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
            self._note(job_id, "stop requested: the job saves a checkpoint and stops")
            self._signal(job_id, worker, signal.SIGTERM)
        while job_id in self._workers:
            await asyncio.sleep(POLL_SECONDS / 2)
            self._reap()
        self.wake()

    def resume(self, job_id: str) -> None:
        """Queue a stopped, interrupted or failed job again, to continue from its last checkpoint; a job
        that never started (stopped while queued) starts from the beginning."""
        job = self.store.get(job_id)
        if job is None:
            raise ResumeRefused("no such job")
        if job.status not in RESUMABLE:
            raise ResumeRefused(f"only stopped, interrupted or failed experiments can be resumed; "
                                f"{job_id} is {job.status}")
        if has_checkpoint(self.job_dir(job_id) / "run"):
            self.store.requeue(job_id, resume=True)
            self._note(job_id, "resume requested: queued, to continue from the last checkpoint")
        elif not job.started:
            self.store.requeue(job_id, resume=False)
            self._note(job_id, "resume requested: queued (it never started, so it starts from the beginning)")
        else:
            raise ResumeRefused(f"{job_id} saved no checkpoint to resume from; submit its manifest again "
                                "to start over")
        self.wake()

    def delete(self, job_id: str) -> Path | None:
        """Forget a finished job: its row goes, and its folder is renamed out of the way at once; returns
        the renamed folder for the caller to remove (`files.remove_tree`), None when there was none."""
        job = self.store.get(job_id)
        if job is None:
            raise DeleteRefused("no such job")
        if job.status not in TERMINAL or job_id in self._workers:
            raise DeleteRefused(f"{job_id} is {job.status}; stop it first (`agile arena stop {job_id}`), "
                                "then delete it")
        self.store.delete(job_id)
        trash = self.jobs_dir / f"{TRASH_PREFIX}{job_id}-{secrets.token_hex(4)}"
        try:
            os.rename(self.job_dir(job_id), trash)
        except FileNotFoundError:
            return None
        return trash

    def remove_trash(self) -> None:
        """Remove job folders whose deletion a previous server did not finish."""
        try:
            leftovers = [entry for entry in self.jobs_dir.iterdir() if entry.name.startswith(TRASH_PREFIX)]
        except OSError:
            return
        for folder in leftovers:
            try:
                files.remove_tree(folder)
            except (OSError, RecursionError) as exc:
                logger.warning("arena: cannot remove the deleted job folder %s: %s", folder.name, exc)

    def _how_to_continue(self, job_id: str) -> str:
        if has_checkpoint(self.job_dir(job_id) / "run"):
            return resume_hint(job_id)
        return "no checkpoint was saved; submit its manifest again to start over"

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
        return f"the job was killed by signal {signum} ({name})"

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
        if not lines:
            return ""
        return hide_paths(lines[-1], job_replacements(self.job_dir(job_id), self.jobs_dir.parent))[:300]
