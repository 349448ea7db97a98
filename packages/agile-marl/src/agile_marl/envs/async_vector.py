"""`AsyncPettingZooVecEnv`: the vector env with its sub-envs in subprocesses (spawn by default).

Each worker owns a consecutive chunk of sub-envs and steps it with the same `SubEnvBatch` as the
synchronous env, so both give identical results for the same seed. The factories must be
picklable (see `agile_marl.envs.factory.make_env_factory`).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import pickle
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from agile_marl.envs.batch import SubEnvBatch, SubEnvError
from agile_marl.envs.vector import EnvFn, MultiAgentVecEnv


def _worker(conn: Connection, env_fns: list[EnvFn], first_index: int) -> None:
    """Worker loop: build the chunk's sub-envs, then answer reset / step / close commands."""
    batch: SubEnvBatch | None = None
    row = 0
    try:
        envs = []
        for fn in env_fns:
            envs.append(fn())
            row += 1
        batch = SubEnvBatch(envs, first_index)
        conn.send(("ok", (batch.agents, batch.observation_spaces, batch.action_spaces)))
    except Exception as exc:
        conn.send(("error", f"sub-env {first_index + min(row, len(env_fns) - 1)}: building it raised {type(exc).__name__}: {exc}\n"
                            f"{traceback.format_exc()}"))
        conn.close()
        return
    while True:
        try:
            command, payload = conn.recv()
        except (EOFError, KeyboardInterrupt):
            break
        try:
            if command == "reset":
                conn.send(("ok", batch.reset(*payload)))
            elif command == "step":
                conn.send(("ok", batch.step(payload)))
            elif command == "close":
                batch.close()
                conn.send(("ok", None))
                break
            else:
                raise ValueError(f"unknown command {command!r}")
        except SubEnvError as exc:
            cause = exc.__cause__ or exc
            detail = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
            conn.send(("error", f"{exc}\n{detail}"))
        except Exception as exc:
            conn.send(("error", f"worker of sub-envs from {first_index}: {type(exc).__name__}: {exc}\n"
                                f"{traceback.format_exc()}"))
    conn.close()


class AsyncPettingZooVecEnv(MultiAgentVecEnv):
    """Sub-envs in subprocesses, same interface and results as `PettingZooVecEnv`.

    Args:
        env_fns: one picklable zero-argument factory per sub-env.
        context: multiprocessing start method ("spawn": safe with torch and threads).
        num_workers: subprocesses (default ``min(num_envs, os.cpu_count())``); worker w steps a
            consecutive chunk of sub-envs.
        copy, seed: as for `PettingZooVecEnv`.
    """

    def __init__(self, env_fns: Sequence[EnvFn], context: str = "spawn", num_workers: int | None = None,
                 copy: bool = True, seed: int | None = None) -> None:
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("a vector env needs at least one sub-env")
        self.context = context
        self._requested_workers = num_workers
        workers = min(len(env_fns), num_workers or os.cpu_count() or 1)
        bounds = np.linspace(0, len(env_fns), workers + 1).round().astype(int)
        self._chunks = [slice(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]
        self._conns: list[Connection] = []
        self._processes: list[Any] = []
        self.closed = False
        ctx: Any = mp.get_context(context)
        try:
            for chunk in self._chunks:
                parent, child = ctx.Pipe()
                process = ctx.Process(target=_worker, args=(child, env_fns[chunk], chunk.start), daemon=True,
                                      name=f"agile-marl-env-{chunk.start}")
                try:
                    process.start()
                except (pickle.PicklingError, AttributeError, TypeError) as exc:
                    raise TypeError(f"the sub-env factories must be picklable for subprocess envs "
                                    f"(use agile_marl.envs.make_env_factory, not a lambda): {exc}") from exc
                finally:
                    child.close()
                self._conns.append(parent)
                self._processes.append(process)
            descriptions = self._receive_all()
        except BaseException:
            self._terminate()
            raise
        agents, obs_spaces, action_spaces = descriptions[0]
        for chunk, other in zip(self._chunks[1:], descriptions[1:], strict=True):
            if other != descriptions[0]:
                self._terminate()
                raise ValueError(f"sub-env {chunk.start} has other agents or spaces than sub-env 0: "
                                 f"{other[0]} vs {agents}")
        super().__init__(env_fns, agents, obs_spaces, action_spaces, copy=copy, seed=seed)

    def _receive_all(self) -> list[Any]:
        results: list[Any] = []
        errors: list[Any] = []
        for conn in self._conns:
            try:
                status, payload = conn.recv()
            except EOFError:
                status, payload = "error", "a worker process died"
            (results if status == "ok" else errors).append(payload)
        if errors:
            raise SubEnvError(errors[0])
        return results

    def _reset(self, seeds: list[int | None], options: dict[str, Any] | None) -> None:
        for conn, chunk in zip(self._conns, self._chunks, strict=True):
            conn.send(("reset", (seeds[chunk], options)))
        self._gather()

    def _step(self, actions: dict[str, np.ndarray]) -> None:
        for conn, chunk in zip(self._conns, self._chunks, strict=True):
            conn.send(("step", {agent: rows[chunk] for agent, rows in actions.items()}))
        self._gather()

    def _gather(self) -> None:
        for chunk, outputs in zip(self._chunks, self._receive_all(), strict=True):
            self._out.assign(chunk, outputs)

    def widened(self, copies: int) -> AsyncPettingZooVecEnv:
        workers = None if self._requested_workers is None else self._requested_workers * copies
        return AsyncPettingZooVecEnv(self._widened_fns(copies), context=self.context, num_workers=workers,
                                     copy=self.copy)

    def close(self) -> None:
        """Close the sub-envs and end the workers (terminated when they do not answer)."""
        if self.closed:
            return
        self.closed = True
        for conn in self._conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(("close", None))
        for conn in self._conns:
            try:
                if conn.poll(5):
                    conn.recv()
            except (EOFError, OSError):
                pass
        self._terminate()

    def _terminate(self) -> None:
        self.closed = True
        for process in self._processes:
            process.join(timeout=1)
            if process.is_alive():
                process.terminate()
                process.join(timeout=1)
        for conn in self._conns:
            conn.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            with contextlib.suppress(Exception):
                self.close()
