"""WorkerPool without a cluster: a fake `ray` whose actors can be dead, to check restarts,
retries, the retry limit and abandoning on Ctrl-C."""

import itertools

import pytest

from agile_core.distributed.errors import WorkerLostError, WorkerStartError
from agile_core.distributed.pool import WorkerPool


class RayActorError(Exception):
    actor_init_failed = False


class InitFailed(RayActorError):
    actor_init_failed = True


class Ref:
    def __init__(self, value=None, error=None, pending=False):
        self.value, self.error, self.pending = value, error, pending


class Actor:
    ids = itertools.count()

    def __init__(self, dead=False):
        self.id, self.dead, self.killed = next(self.ids), dead, False


class FakeRay:
    class exceptions:
        RayActorError = RayActorError

    def wait(self, refs, num_returns=1, timeout=None):
        done = [ref for ref in refs if not ref.pending]
        return done[:num_returns], [ref for ref in refs if ref not in done[:num_returns]]

    def get(self, ref):
        if ref.error is not None:
            raise ref.error
        return ref.value

    def kill(self, actor, no_restart=True):
        actor.killed = True


def submit(actor, slot, fresh):
    return Ref(error=RayActorError("died")) if actor.dead else Ref(value=(slot, actor.id, fresh))


def test_a_dead_worker_is_replaced_once_and_its_members_are_sent_again():
    spawned = iter([Actor(), Actor(dead=True), Actor()])
    pool = WorkerPool(FakeRay(), lambda: next(spawned), size=2)
    first, dead = pool.workers
    results = pool.run(range(4), submit, "training")
    assert sorted(results) == [0, 1, 2, 3]
    assert [value[0] for value, _ in (results[s] for s in range(4))] == [0, 1, 2, 3]
    assert results[0][0][1] == first.id and results[2][0][1] == first.id and not results[0][0][2]
    replacement = pool.workers[1]
    assert dead.killed and replacement is not dead
    assert results[1][0] == (1, replacement.id, True) and results[3][0] == (3, replacement.id, True)
    assert [(lost.worker, lost.request) for lost in pool.lost] == [(1, "training")]  # one loss for two members
    assert pool.incarnations == [0, 1]
    assert pool.holds(results[1][1]) and not pool.holds(type(results[1][1])(1, 0))


def test_a_member_that_keeps_losing_workers_stops_the_run():
    pool = WorkerPool(FakeRay(), lambda: Actor(dead=True), size=1, max_retries=2)
    with pytest.raises(WorkerLostError, match="member 0: training failed on 3 workers"):
        pool.run([0], submit, "training")


def test_ctrl_c_abandons_the_requests_in_flight():
    pool = WorkerPool(FakeRay(), Actor, size=2)
    busy = pool.workers[0]
    results = pool.run([0], lambda actor, slot, fresh: Ref(pending=True), "training", should_stop=lambda: True)
    assert results is None
    assert busy.killed and pool.workers[0] is not busy and pool.incarnations == [1, 0]
    pool.close()
    assert pool.workers == []


def test_a_worker_that_cannot_start_stops_the_run_with_its_error():
    def failing(actor, slot, fresh):
        return Ref(error=InitFailed("Traceback ...\nModuleNotFoundError: No module named 'box2d'"))

    pool = WorkerPool(FakeRay(), Actor, size=1)
    with pytest.raises(WorkerStartError, match="could not start: ModuleNotFoundError: No module named 'box2d'"):
        pool.run([0], failing, "training")
    assert pool.lost == []
