"""The job sandbox's command line and its start-up rules: what is bound where, what is hidden, and
a server that cannot sandbox refuses to start unless told `--unsafe-no-sandbox`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agile_arena.server.sandbox import JobLimits, Sandbox, installation_paths


def _pairs(args: list[str], flag: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, arg in enumerate(args) if arg == flag]


def test_the_command_binds_the_installation_read_only_hides_the_data_folder_and_binds_the_job(tmp_path: Path) -> None:
    data = tmp_path / "data"
    job = data / "jobs" / "0123456789abcdef"
    job.mkdir(parents=True)
    sandbox = Sandbox(read_only=(str(tmp_path),), hidden=(str(data),), as_root=True)
    args = sandbox.command(["python", "-m", "worker"], job, uid=3_500_001)
    assert args[0] == "bwrap" and args[-3:] == ["python", "-m", "worker"]
    for flag in ("--unshare-net", "--unshare-pid", "--unshare-ipc", "--die-with-parent"):
        assert flag in args
    assert "--new-session" not in args  # the runner signals the worker's process group
    assert (str(tmp_path), str(tmp_path)) in _pairs(args, "--ro-bind")
    hidden_at = args.index("--tmpfs", args.index(str(data)) - 1)
    assert args[hidden_at + 1] == str(data)
    assert hidden_at > max(i for i, arg in enumerate(args) if arg == "--ro-bind")  # hides even a bound parent
    assert _pairs(args, "--bind") == [(str(job.resolve()), str(job.resolve()))]
    assert args.index("--remount-ro") > args.index("--bind")
    setpriv = args.index("setpriv")
    assert args[setpriv + 1:setpriv + 3] == ["--reuid=3500001", "--regid=3500001"]
    unprivileged = Sandbox(read_only=(), hidden=(str(data),), as_root=False).command(["python"], job, uid=None)
    assert "--unshare-user" in unprivileged and "setpriv" not in unprivileged


def test_installation_paths_leave_out_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = installation_paths()
    assert str(tmp_path.resolve()) not in found
    assert os.path.realpath(sys.prefix) in found or any(os.path.realpath(sys.prefix).startswith(p + "/") for p in found)
    assert all(not a.startswith(b + "/") for a in found for b in found if a != b)  # outermost folders only


def test_limits_describe_themselves_and_a_disabled_sandbox_says_it_is_unsafe() -> None:
    assert JobLimits().describe().startswith("memory 16 GiB, 512 processes and threads")
    assert "WARNING: no sandbox" in Sandbox.disabled().describe()
    assert Sandbox.disabled().command(["python", "x"], Path("/j"), None) == ["python", "x"]


def test_a_server_that_cannot_sandbox_refuses_to_start_unless_told_it_may_run_unsafe(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}  # no bwrap on PATH
    command = [sys.executable, "-m", "agile_arena.server", "serve", "--data-dir", str(tmp_path / "data"), "--port", "0"]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 2, refused.stderr
    assert "bubblewrap" in refused.stderr and "--unsafe-no-sandbox" in refused.stderr
    unsafe = subprocess.Popen([*command, "--unsafe-no-sandbox"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env)
    try:
        assert unsafe.stdout is not None
        seen = ""
        for line in unsafe.stdout:
            seen += line
            if "listening on" in line:
                break
        assert "WARNING: no sandbox" in seen, seen
    finally:
        unsafe.terminate()
        unsafe.wait(timeout=60)
