"""One sandbox per job: bubblewrap namespaces, resource limits and, on a root server, a uid of its own.

A job's code (its environment's entrypoint, its wrappers, gymnasium's ``module:EnvId`` ids) runs
inside the worker, so the worker is what gets confined. `Sandbox.command` wraps the worker's
command line so that it

- sees only its own job folder (read-write), the Python installation and the installed packages
  (read-only), the system's ``/usr`` (read-only), a private ``/proc`` and a minimal ``/dev``;
  temporary files go to the job folder (``TMPDIR``), so they count against its disk limit; the server's data folder (the store, the keys, every other
  job) is hidden behind an empty mount even when an installed package lies above it;
- has no network (a network namespace with only a loopback device that is down), no shared IPC,
  its own process tree (it cannot see or signal the server's or other jobs' processes);
- runs under `JobLimits` (address space, CPU seconds, processes and threads, file size), with the
  job folder's total size watched by the runner (`folder_over_quota`).

On a root server the worker also runs as an unprivileged uid of its own (`uid_base` plus its slot;
each data folder gets its own range of :data:`UIDS_PER_SERVER`, so two servers on one host do not
share uids), so the process limit counts only that job's processes and file permissions separate
jobs a second time. A server run by an ordinary user keeps its uid inside an unprivileged user namespace: the
process limit then counts every process of that user (the job's limit is added to what the user
already runs), which bounds a fork bomb but is not a per-job count.

What it does not do: it is not a virtual machine (a kernel exploit escapes it), it does not bound
memory a job keeps in page cache or pipes, and GPU devices (``/dev/nvidia*``) are passed through
when the server's device is CUDA, which exposes the driver's attack surface.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BWRAP = "bwrap"
SETPRIV = "setpriv"
DEFAULT_UID_BASE = 3_500_000
UIDS_PER_SERVER = 256
SERVER_RANGES = 4096
TMP_FOLDER = ".tmp"
HOME_FOLDER = ".home"
GIB = 1024**3
_SYSTEM_LINKS = ("/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/nsswitch.conf", "/etc/ssl")


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be set up on this host (the message says why and what to install)."""


@dataclass(frozen=True)
class JobLimits:
    """What one job may use; None lifts a limit. `processes` counts threads too (Linux counts tasks)."""

    memory_bytes: int | None = 16 * GIB
    cpu_seconds: int | None = 7 * 24 * 3600
    processes: int | None = 512
    file_bytes: int | None = 16 * GIB
    disk_bytes: int | None = 64 * GIB

    def describe(self) -> str:
        """`memory 16 GiB, 512 processes, ...` for logs and docs."""
        parts = []
        if self.memory_bytes is not None:
            parts.append(f"memory {_size(self.memory_bytes)}")
        if self.processes is not None:
            parts.append(f"{self.processes} processes and threads")
        if self.cpu_seconds is not None:
            parts.append(f"{self.cpu_seconds} CPU seconds per process")
        if self.file_bytes is not None:
            parts.append(f"files up to {_size(self.file_bytes)}")
        if self.disk_bytes is not None:
            parts.append(f"job folder up to {_size(self.disk_bytes)}")
        return ", ".join(parts) or "no limits"


def _size(count: int) -> str:
    return f"{count / GIB:g} GiB" if count >= GIB else f"{count / 1024**2:g} MiB"


@dataclass(frozen=True)
class Sandbox:
    """How the runner wraps each worker. `enabled=False` is the explicit unsafe mode (no isolation)."""

    enabled: bool = True
    limits: JobLimits = field(default_factory=JobLimits)
    read_only: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    as_root: bool = False
    uid_base: int = DEFAULT_UID_BASE
    gpu: bool = False

    @classmethod
    def for_server(cls, data_dir: Path, limits: JobLimits | None = None, device: str = "cpu",
                   uid_base: int | None = None, extra_read_only: Iterable[str] = ()) -> Sandbox:
        """The sandbox of a server over `data_dir`; raises SandboxUnavailable when this host cannot
        run it (no bubblewrap, no namespaces). `uid_base` defaults to this data folder's range."""
        if uid_base is None:
            uid_base = DEFAULT_UID_BASE + UIDS_PER_SERVER * (zlib.crc32(str(data_dir.resolve()).encode()) % SERVER_RANGES)
        as_root = os.geteuid() == 0
        if shutil.which(BWRAP) is None:
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: "
                                     "apt-get install bubblewrap) or start the server with --unsafe-no-sandbox")
        if as_root and shutil.which(SETPRIV) is None:
            raise SandboxUnavailable("setpriv (util-linux) is needed to run jobs as their own uid")
        sandbox = cls(enabled=True, limits=limits or JobLimits(), read_only=installation_paths(extra_read_only),
                      hidden=(str(data_dir.resolve()),), as_root=as_root, uid_base=uid_base,
                      gpu=device.startswith("cuda"))
        sandbox.check()
        return sandbox

    @classmethod
    def disabled(cls) -> Sandbox:
        """No isolation at all (`--unsafe-no-sandbox`)."""
        return cls(enabled=False, limits=JobLimits(None, None, None, None, None))

    def describe(self) -> str:
        """One line for the server's start-up output and every job's log."""
        if not self.enabled:
            return ("WARNING: no sandbox (--unsafe-no-sandbox): job code runs as the server's user and can "
                    "read and write everything the server can")
        who = f"its own uid ({self.uid_base}+slot)" if self.as_root else "the server's uid in a user namespace"
        return (f"sandbox: bubblewrap, as {who}; sees its job folder (read-write) and the installed packages "
                f"(read-only); no network; limits: {self.limits.describe()}")

    def job_uid(self, slot: int) -> int | None:
        """The uid of the job in `slot` (None when jobs keep the server's uid)."""
        return self.uid_base + slot if self.enabled and self.as_root else None

    # ------------------------------------------------------------------ the command line
    def command(self, argv: Sequence[str], job_dir: Path, uid: int | None) -> list[str]:
        """`argv` (the worker's command) wrapped in the sandbox for `job_dir`, run as `uid`."""
        if not self.enabled:
            return list(argv)
        job = str(job_dir.resolve())
        args = [BWRAP, "--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--hostname", "arena-job"]
        if not self.as_root:
            args += ["--unshare-user"]
        else:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for setpriv, dropped by it
        args += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/usr", "/usr"]
        for link in _SYSTEM_LINKS:
            if os.path.islink(link):
                args += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                args += ["--ro-bind", link, link]
        if self.gpu:
            for device in sorted(Path("/dev").glob("nvidia*")):
                args += ["--dev-bind", str(device), str(device)]
        made: set[str] = {"/", "/usr", "/proc", "/dev", *_SYSTEM_LINKS}
        for path in (*(p for p in _ETC_FILES if os.path.exists(p)), *self.read_only):
            args += [*_parents(path, made), "--ro-bind", path, path]
        for path in self.hidden:  # after the installation: hides the data folder even below a bound one
            args += [*_parents(path, made), "--perms", "0755", "--tmpfs", path]
        args += [*_parents(job, made), "--bind", job, job, "--chdir", job]
        if "/tmp" not in made:  # present but read-only: temporary files go to the job folder (TMPDIR)
            args += ["--perms", "0755", "--dir", "/tmp"]
        args += ["--remount-ro", "/"]  # the sandbox's own root: nothing can be written outside the job folder
        args += ["--setenv", "HOME", str(job_dir / HOME_FOLDER), "--setenv", "TMPDIR", str(job_dir / TMP_FOLDER),
                 "--setenv", "USER", "arena-job", "--setenv", "LOGNAME", "arena-job", "--"]
        if uid is not None:
            args += [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                     "--bounding-set=-all", "--"]
        return args + list(argv)

    def prepare(self, job_dir: Path, uid: int | None) -> None:
        """Create the job's private /tmp and home, and give the folder to `uid` (root servers)."""
        if not self.enabled:
            return
        for name in (TMP_FOLDER, HOME_FOLDER):
            (job_dir / name).mkdir(exist_ok=True)
        if uid is not None:
            for folder, dirs, names in os.walk(job_dir):
                os.lchown(folder, uid, uid)
                for name in (*dirs, *names):
                    os.lchown(os.path.join(folder, name), uid, uid)

    def limit_setter(self) -> Callable[[], None] | None:
        """The `preexec_fn` that applies the limits in the child before bubblewrap starts."""
        if not self.enabled:
            return None
        limits = self.limits
        processes = limits.processes
        if processes is not None and not self.as_root:
            processes += user_task_count()  # the whole user is counted: add what it runs already
        settings = [(resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_CPU, limits.cpu_seconds),
                    (resource.RLIMIT_NPROC, processes), (resource.RLIMIT_FSIZE, limits.file_bytes)]
        chosen = [(which, value) for which, value in settings if value is not None]

        def apply() -> None:
            for which, value in chosen:
                resource.setrlimit(which, (value, value))

        return apply

    def check(self) -> None:
        """Run `python -c pass` in the sandbox once; SandboxUnavailable with bubblewrap's words if it fails."""
        probe = Path(os.environ.get("TMPDIR", "/tmp")).resolve()
        folder = Path(probe / f"agile-arena-probe-{os.getpid()}")
        folder.mkdir(exist_ok=True)
        try:
            uid = self.job_uid(0)
            self.prepare(folder, uid)
            result = subprocess.run(self.command([sys.executable, "-c", "pass"], folder, uid),
                                    capture_output=True, text=True, timeout=60, preexec_fn=self.limit_setter(),
                                    stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"bubblewrap could not start: {exc}") from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if result.returncode != 0:
            said = " ".join((result.stderr or result.stdout).split())[:300]
            raise SandboxUnavailable(f"bubblewrap could not start a sandbox ({said}); the host may forbid user "
                                     "namespaces; see docs/arena.md, or start with --unsafe-no-sandbox")


def _parents(path: str, made: set[str]) -> list[str]:
    """`--dir` for each missing ancestor of `path` (0755, so an unprivileged job can walk through)."""
    args: list[str] = []
    for parent in reversed(Path(path).parents):
        name = str(parent)
        if name not in made:
            made.add(name)
            args += ["--perms", "0755", "--dir", name]
    made.add(path)
    return args


def installation_paths(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Folders a worker needs to read: the interpreter's prefixes and every import path (the server's
    working directory excluded: it is not an installation), outermost first, without duplicates."""
    cwd = os.path.realpath(os.getcwd())
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
                  *(entry for entry in sys.path if entry), *extra]
    found: list[str] = []
    for entry in candidates:
        real = os.path.realpath(entry)
        if real == cwd or real == "/" or not os.path.isdir(real):
            continue
        if any(real == kept or real.startswith(kept.rstrip("/") + "/") for kept in found):
            continue
        found = [kept for kept in found if not kept.startswith(real.rstrip("/") + "/")] + [real]
    return tuple(sorted(found))


def user_task_count() -> int:
    """Tasks (processes and threads) the current user runs now (Linux; 0 elsewhere)."""
    uid = os.getuid()
    count = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return count


def folder_over_quota(job_dir: Path, limit: int | None) -> int | None:
    """The job folder's size when it exceeds `limit`, else None."""
    if limit is None:
        return None
    from agile_arena.server.files import folder_bytes

    try:
        size = folder_bytes(job_dir)
    except OSError:
        return None
    return size if size > limit else None
