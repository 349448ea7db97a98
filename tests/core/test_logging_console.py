"""Tests for the console helpers: progress bar and per-generation table."""

from __future__ import annotations

import io
from typing import Any

from agile_core.logging import (
    GenerationRow,
    ProgressBar,
    format_generation_table,
    print_generation_table,
)
from agile_core.logging._format import format_count, format_duration, format_number


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_disabled_when_not_a_tty() -> None:
    stream = io.StringIO()  # isatty() is False
    bar = ProgressBar(1000, stream=stream)
    assert bar.mode == "off" and not bar.enabled
    for _ in range(10):
        bar.update(100)
    bar.close()
    assert stream.getvalue() == ""


def test_progress_plain_status_when_verbose_and_not_tty() -> None:
    stream, clock = io.StringIO(), _Clock()
    bar = ProgressBar(
        10_000, desc="train", stream=stream, verbose=True, status_interval=30.0, clock=clock
    )
    assert bar.mode == "status"
    for _ in range(10):  # 10 s of progress: below the status interval
        clock.now += 1.0
        bar.update(100)
    assert stream.getvalue() == ""
    clock.now += 25.0
    bar.update(500)  # 1500 steps in 35 s
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("train 1.5k/10k steps (15.0%)")
    assert "42.9 steps/s" in lines[0] and "ETA 03:18" in lines[0]
    assert "\r" not in stream.getvalue()
    bar.close()
    assert len(stream.getvalue().splitlines()) == 2


def test_progress_bar_on_tty_is_rate_limited() -> None:
    stream, clock = _Tty(), _Clock()
    with ProgressBar(1000, desc="gen 3", stream=stream, clock=clock, min_interval=0.2) as bar:
        assert bar.mode == "bar"
        for _ in range(100):  # 100 updates within 1 s: at most ~5 redraws plus the first
            clock.now += 0.01
            bar.update(5)
        draws = stream.getvalue().count("\r")
        assert 1 <= draws <= 6
        assert "steps/s" in stream.getvalue() and "ETA" in stream.getvalue()
    assert stream.getvalue().endswith("\n")
    line = bar.bar_line(width=70)
    assert len(line) <= 70 and line.startswith("gen 3: |") and "50%" in line


def test_progress_resume_measures_rate_from_initial_step() -> None:
    clock = _Clock()
    bar = ProgressBar(2000, initial=1000, enabled=False, clock=clock)
    assert bar.eta() is None
    clock.now += 10.0
    bar.set(1500)
    assert bar.rate() == 50.0 and bar.eta() == 10.0


def test_number_and_duration_formatting() -> None:
    assert format_number(3.2e-4) == "3.2e-04"
    assert format_number(0.97312) == "0.9731"
    assert format_number(1234.5) == "1234"
    assert format_number(123456.0) == "1.2e+05"
    assert format_number(64) == "64"
    assert format_number(0.0) == "0"
    assert format_number(float("nan")) == "nan"
    assert format_number(None) == "-"
    assert (
        format_count(950) == "950"
        and format_count(12_345) == "12.3k"
        and format_count(4_560_000) == "4.56M"
    )
    assert format_duration(59) == "00:59" and format_duration(3725) == "1:02:05"
    assert format_duration(None) == "--:--"


def test_generation_table_alignment() -> None:
    rows: list[GenerationRow | dict[str, Any]] = [
        GenerationRow(0, 12.5, {"lr": 3.2e-4, "batch_size": 64}, "lr 2.7e-04 -> 3.2e-04"),
        {"agent_id": 1, "fitness": -0.25, "hyperparameters": {"lr": 1e-3}, "mutation": None},
        GenerationRow(
            10, 200.0, {"lr": 5e-5, "batch_size": 128, "learn_step_with_long_name": 4}, "none"
        ),
    ]
    text = format_generation_table(rows, generation=7)
    lines = text.splitlines()
    assert lines[0] == "generation 7"
    header, rule, *body = lines[1:]
    assert header.split() == ["agent", "fitness", "lr", "batch_size", "learn_step_…", "mutation"]
    assert set(rule.replace(" ", "")) == {"-"}
    assert len(body) == 3
    # numeric columns are right-aligned at the same column
    fitness_end = header.index("fitness") + len("fitness")
    for line, value in zip(body, ["12.5", "-0.25", "200"], strict=True):
        assert line[:fitness_end].endswith(value)
    assert "3.2e-04" in body[0] and "1.0e-03" in body[1] and "5.0e-05" in body[2]
    assert body[2].startswith("*10")  # best fitness is marked
    assert body[1].split()[-2:] == ["-", "-"]  # missing hyperparameter and no mutation

    selected = format_generation_table(rows, hyperparameters=["lr"])
    assert "batch_size" not in selected
    out = io.StringIO()
    print_generation_table(rows, stream=out)
    assert out.getvalue() == format_generation_table(rows) + "\n"
