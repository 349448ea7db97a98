"""A fixed set of Ray worker actors that replaces the ones that die.

Member `slot` goes to worker ``slot % size``. When a worker dies (``RayActorError``: its
process was killed, its node lost), a fresh actor takes its place and every request that was
on it is sent again, from what the driver still holds (the member as it was before the request).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agile_core.distributed.errors import WorkerLostError, WorkerStartError

_POLL_S = 0.5
"""How often a wait for workers checks for Ctrl-C."""

Submit = Callable[[Any, int, bool], Any]
"""(actor, slot, fresh) -> ObjectRef; `fresh` is True when the actor may not hold what an
earlier request left on its predecessor."""


@dataclass(frozen=True)
class Placement:
    """Where a request ran: worker position and the actor's incarnation there."""

    worker: int
    incarnation: int


@dataclass(frozen=True)
class LostWorker:
    """A worker that died while it had requests (recorded for the report and the tests)."""

    worker: int
    slot: int
    request: str
    error: str


class WorkerPool:
    """`size` actors made by `spawn`, with restarts; a context manager that kills them at exit."""

    def __init__(self, ray: Any, spawn: Callable[[], Any], size: int, max_retries: int = 3) -> None:
        self.ray = ray
        self.spawn = spawn
        self.max_retries = max_retries
        self.workers = [spawn() for _ in range(size)]
        self.incarnations = [0] * size
        self.lost: list[LostWorker] = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every actor (they hold nothing the driver needs)."""
        for actor in self.workers:
            self._kill(actor)
        self.workers = []

    def worker_of(self, slot: int) -> int:
        """The worker position that serves member `slot`."""
        return slot % len(self.workers)

    def holds(self, placement: Placement | None) -> bool:
        """Whether the actor of an earlier request's `placement` is still the one in place."""
        return placement is not None and self.incarnations[placement.worker] == placement.incarnation

    def run(self, slots: Iterable[int], submit: Submit, request: str,
            should_stop: Callable[[], bool] | None = None) -> dict[int, tuple[Any, Placement]] | None:
        """Send one request per slot, wait for all, retry the ones whose worker died on its
        replacement; return each slot's value and where it finally ran.

        When `should_stop()` turns true first (Ctrl-C), the requests still running are abandoned
        (their workers replaced) and None is returned: the driver still holds every member as it
        was before the requests."""
        tries: dict[int, int] = {}
        in_flight: dict[Any, tuple[int, Placement]] = {}

        def send(slot: int, fresh: bool) -> None:
            worker = self.worker_of(slot)
            placement = Placement(worker, self.incarnations[worker])
            in_flight[submit(self.workers[worker], slot, fresh)] = (slot, placement)

        for slot in slots:
            tries[slot] = 0
            send(slot, False)
        results: dict[int, tuple[Any, Placement]] = {}
        while in_flight:
            done, _ = self.ray.wait(list(in_flight), num_returns=1, timeout=_POLL_S)
            if not done:
                if should_stop is not None and should_stop():
                    self._abandon({placement.worker for _, placement in in_flight.values()})
                    return None
                continue
            ready = done[0]
            slot, placement = in_flight.pop(ready)
            try:
                results[slot] = (self.ray.get(ready), placement)
            except self.ray.exceptions.RayActorError as exc:
                if getattr(exc, "actor_init_failed", False):  # a bug or a missing package, not a lost worker
                    lines = str(exc).strip().splitlines() or [type(exc).__name__]
                    raise WorkerStartError(f"a Ray worker could not start: {lines[-1]}") from exc
                tries[slot] += 1
                if tries[slot] > self.max_retries:
                    raise WorkerLostError(f"member {slot}: {request} failed on {tries[slot]} workers in a row "
                                          f"(last: {type(exc).__name__})") from exc
                if self.holds(placement):  # the first failure seen on this actor: replace it
                    self._replace(placement.worker, slot, request, exc)
                send(slot, True)
        return results

    def _abandon(self, workers: set[int]) -> None:
        for worker in sorted(workers):
            self._kill(self.workers[worker])
            self.workers[worker] = self.spawn()
            self.incarnations[worker] += 1

    def _replace(self, worker: int, slot: int, request: str, exc: BaseException) -> None:
        self.lost.append(LostWorker(worker, slot, request, type(exc).__name__))
        print(f"ray backend: worker {worker} was lost during {request} of member {slot} "
              f"({type(exc).__name__}); restarting it on a fresh actor", file=sys.stderr)
        self._kill(self.workers[worker])
        self.workers[worker] = self.spawn()
        self.incarnations[worker] += 1

    def _kill(self, actor: Any) -> None:
        with contextlib.suppress(Exception):  # already gone (dead actor, lost node): nothing to stop
            self.ray.kill(actor, no_restart=True)
