"""The section profiler: exclusive nesting, inclusive time, call counts."""

from __future__ import annotations

import time

import pytest

from agile_core.training.profiling import Profiler


def test_inner_sections_take_their_time_from_the_enclosing_one() -> None:
    profiler = Profiler()
    with profiler.run():
        with profiler.evaluate:
            time.sleep(0.02)
            for _ in range(2):
                with profiler.env:
                    time.sleep(0.03)
            with profiler.evaluate:  # re-entering the same section counts once
                time.sleep(0.01)
        time.sleep(0.01)
    summary = profiler.summary()
    # sleeps may overrun on a busy machine, never undershoot: exclusive time is what remains of
    # the inclusive time once the inner sections took theirs
    assert summary["env"]["seconds"] >= 0.06
    assert summary["env"]["calls"] == 2
    assert summary["evaluate"]["seconds"] >= 0.03
    assert summary["evaluate"]["inclusive_seconds"] == pytest.approx(
        summary["evaluate"]["seconds"] + summary["env"]["seconds"], abs=2e-3)
    assert summary["evaluate"]["calls"] == 1
    assert summary["other"]["seconds"] >= 0.01
    assert sum(row["share"] for name, row in summary.items() if name != "total") == pytest.approx(1.0, abs=0.01)


def test_disabled_profiler_records_nothing() -> None:
    profiler = Profiler()
    with profiler.learn:
        time.sleep(0.005)
    assert profiler.learn.total == 0.0 and profiler.learn.calls == 0 and not profiler.stack
