"""`arena_server`: a real `python -m agile_arena.server serve` subprocess on a free port, for the
server's and the client's tests (see /work/arena_contract.md)."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agile_arena import ArenaClient
from agile_cli.commands import arena as arena_command
from tests.arena.test_client import KEY, FakeArena

READY = "agile arena server listening on "
SANDBOX = shutil.which("bwrap") is not None
"""Whether jobs run in the bubblewrap sandbox here; without it the servers of the tests run with
--unsafe-no-sandbox, unless AGILE_REQUIRE_SANDBOX is set (CI), which makes that an error."""
START_TIMEOUT_S = 90.0  # imports take ~2 s; much longer on a loaded 2-core machine


class ArenaServer:
    """One arena server process over `data_dir`; its stdout and stderr go to `log_path`.

    `.url` (updated by `restart`), `.key` (created for the tests), `.data_dir`, `.create_key(name)`,
    `.stop()` (SIGTERM: running jobs are checkpointed and marked interrupted), `.kill()` (SIGKILL),
    `.restart()`, `.output()` (everything the server printed so far).
    """

    def __init__(self, data_dir: Path, log_path: Path, slots: int = 1, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.slots = slots
        self.extra_args = extra_args + sandbox_args()
        self.env = env or {}
        self.url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.key = self.create_key("tests")

    def create_key(self, name: str) -> str:
        """A new API key for this server's data directory (via the documented CLI)."""
        result = subprocess.run([sys.executable, "-m", "agile_arena.server", "create-key", "--data-dir",
                                 str(self.data_dir), name], capture_output=True, text=True, timeout=60, check=True)
        return result.stdout.strip()

    def start(self) -> None:
        """Start the server and wait for its "listening on" line."""
        assert self.process is None or self.process.poll() is not None, "already running"
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        env = {**os.environ, "OMP_NUM_THREADS": "1", **self.env}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "agile_arena.server", "serve", "--data-dir", str(self.data_dir),
                 "--port", "0", "--slots", str(self.slots), *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.output()[start:]
            if READY in text:
                self.url = text.split(READY, 1)[1].split()[0]
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"arena server exited with {self.process.returncode}:\n{text}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"arena server not ready after {START_TIMEOUT_S} s:\n{self.output()[start:]}")

    def output(self) -> str:
        """What the server has printed (all starts)."""
        try:
            return self.log_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    @property
    def pid(self) -> int | None:
        """The server process id while it runs."""
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    def stop(self, timeout: float = 90.0) -> None:
        """SIGTERM and wait (workers get the server's stop grace period to checkpoint)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL the server (its workers die with it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def restart(self) -> None:
        """Stop if running, then start again on the same data directory (the port may change)."""
        self.stop()
        self.start()


def sandbox_args() -> tuple[str, ...]:
    """`--unsafe-no-sandbox` where bubblewrap is missing (an error when AGILE_REQUIRE_SANDBOX is set)."""
    if SANDBOX:
        return ()
    if os.environ.get("AGILE_REQUIRE_SANDBOX"):
        raise RuntimeError("AGILE_REQUIRE_SANDBOX is set but bubblewrap (bwrap) is not installed")
    return ("--unsafe-no-sandbox",)


def launch_arena_server(folder: Path, slots: int = 1, extra_args: tuple[str, ...] = (),
                        env: dict[str, str] | None = None) -> ArenaServer:
    """An ArenaServer over `folder/data`, logging to `folder/server.log`, started."""
    server = ArenaServer(folder / "data", folder / "server.log", slots=slots, extra_args=extra_args, env=env)
    server.start()
    return server


@pytest.fixture
def arena_server(tmp_path: Path) -> Iterator[ArenaServer]:
    """A started server with `--slots 1` over a fresh data directory; stopped after the test."""
    server = launch_arena_server(tmp_path / "arena")
    try:
        yield server
    finally:
        server.stop(timeout=60)
        server.kill()


def tiny_ppo_manifest(max_steps: int = 1024, evo_steps: int = 512, checkpoint_steps: int = 512) -> str:
    """A PPO CartPole-v1 manifest that trains in seconds: 2 agents, 2 sub-envs, 16-unit networks,
    a checkpoint every `checkpoint_steps` steps per agent (taken at generation ends)."""
    return f"""\
algorithm:
  name: PPO
  lr: 1.0e-3
  learn_step: 128
  batch_size: 64
  update_epochs: 1
environment:
  name: CartPole-v1
  num_envs: 2
training:
  max_steps: {max_steps}
  evo_steps: {evo_steps}
  pop_size: 2
  eval_loop: 1
  eval_steps: 100
  checkpoint_steps: {checkpoint_steps}
  seed: 0
network:
  latent_dim: 16
  encoder_config:
    hidden_size: [16]
  head_config:
    hidden_size: [16]
"""


def wait_for(condition: object, timeout: float, what: str, interval: float = 0.2) -> object:
    """Call `condition()` until it returns something truthy (returned); fail after `timeout` s."""
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def isolated_settings(tmp_path, monkeypatch) -> None:
    """No key, URL or credentials file from the machine running the tests; a credentials file of
    the test's own."""
    for name in ("AGILE_ARENA_API_KEY", "ARENA_API_KEY", "AGILE_ARENA_URL", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGILE_ARENA_CONFIG", str(tmp_path / "config" / "arena.json"))


@pytest.fixture
def fake(monkeypatch) -> FakeArena:
    """The CLI's clients talk to this fake (the key, URL and options as the CLI resolves them)."""
    server = FakeArena()

    def client(args: argparse.Namespace, api_key: str | None = None) -> ArenaClient:
        return ArenaClient(api_key=api_key, url=args.url or "http://127.0.0.1:8470",
                           transport=httpx.MockTransport(server.handler), sleep=lambda s: None, retries=1)

    monkeypatch.setattr(arena_command, "_client", client)
    monkeypatch.setenv("AGILE_ARENA_API_KEY", KEY)
    return server
