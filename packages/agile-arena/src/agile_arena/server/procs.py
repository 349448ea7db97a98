"""Worker processes: a clean environment, start-up in their own process group, and finding workers
a killed server left behind (Linux /proc; elsewhere only the recorded process group is signalled)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from agile_arena.server.sandbox import Sandbox
from agile_arena.server.worker import JOB_ENV, PARENT_PID_ENV

PASSED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH",
              "VIRTUAL_ENV", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "MUJOCO_GL", "PYOPENGL_PLATFORM",
              "SDL_VIDEODRIVER", "MINARI_DATASETS_PATH", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
              "TORCH_HOME", "XDG_CACHE_HOME", "AGILE_DEBUG")
"""The only server environment variables a worker sees (plus `LC_*`): no keys, tokens or secrets."""


def worker_env(job_id: str, watch_parent: bool = True) -> dict[str, str]:
    """The environment of a job's worker: an allow-list of the server's, OMP_NUM_THREADS=1 unless set,
    unbuffered output, and the markers used to find it again after a crash. `watch_parent` asks the
    worker to check that the server is its parent (not in a sandbox, where bubblewrap is)."""
    env = {name: value for name, value in os.environ.items() if name in PASSED_ENV or name.startswith("LC_")}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env["WANDB_MODE"] = "disabled"
    if watch_parent:
        env[PARENT_PID_ENV] = str(os.getpid())
    env[JOB_ENV] = job_id
    return env


def start_worker(job_id: str, job_dir: Path, resume: bool, device: str, sandbox: Sandbox,
                 slot: int = 0) -> subprocess.Popen[bytes]:
    """Start `python -m agile_arena.server.worker JOB_DIR` in a new session, inside `sandbox` (as the
    uid of `slot` on a root server), output appended to log.txt."""
    command = [sys.executable, "-m", "agile_arena.server.worker", str(job_dir), "--device", device]
    if resume:
        command.append("--resume")
    uid = sandbox.job_uid(slot)
    sandbox.prepare(job_dir, uid)
    with open(job_dir / "log.txt", "ab") as log:
        return subprocess.Popen(sandbox.command(command, job_dir, uid), cwd=job_dir,
                                env=worker_env(job_id, watch_parent=not sandbox.enabled),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True, preexec_fn=sandbox.limit_setter())


def signal_job(job_id: str, pgid: int, signum: int, sandboxed: bool) -> bool:
    """Send `signum` to a job's worker and what it started. Outside a sandbox that is its process
    group; inside, every process of the job but bubblewrap's own (bubblewrap dies on SIGTERM and
    would take the worker with it before it saves a checkpoint). SIGKILL always goes to the group."""
    if not sandboxed or signum == signal.SIGKILL:
        return signal_group(pgid, signum)
    sent = False
    for pid in orphans_of(job_id):
        if _command_name(pid) == "bwrap":
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, signum)
            sent = True
    return sent


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to a process group; False when it no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def orphans_of(job_id: str) -> list[int]:
    """Processes still running for `job_id` (matched by the job marker in their environment, Linux),
    e.g. a worker that outlived a killed server."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    marker = f"{JOB_ENV}={job_id}".encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def kill_orphans(job_id: str) -> int:
    """SIGKILL what a crashed server left running for `job_id` (the worker and anything it started);
    returns how many processes."""
    victims = orphans_of(job_id)
    for pid in victims:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return len(victims)
