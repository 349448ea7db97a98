"""benchmarks/population.py: the fixed + per-member fit and a tiny alternated learn-step run."""

import importlib.util
import json
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "population.py"
spec = importlib.util.spec_from_file_location("population_benchmark", PATH)
assert spec is not None and spec.loader is not None
population = importlib.util.module_from_spec(spec)
spec.loader.exec_module(population)


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_the_fit_recovers_fixed_and_per_member_costs_and_the_ratio_they_imply(capsys):
    population._print_fit("X", [(1, 3.0), (2, 4.0), (4, 6.0), (8, 10.0)])  # 2 ms a call + 1 ms a member
    (fit,) = _lines(capsys)
    assert fit["fixed_ms"] == pytest.approx(2.0) and fit["per_member_ms"] == pytest.approx(1.0)
    assert fit["implied_one_by_one_over_stacked"] == {"1": 1.0, "2": 1.5, "4": 2.0, "8": 2.4}
    population._print_fit("X", [(4, 6.0)])  # one pop size: nothing to fit
    assert _lines(capsys) == []


def test_learn_step_benchmark_alternates_pop_sizes_and_prints_a_fit(capsys):
    population.main(["learn", "--algorithm", "dqn", "--pops", "1", "2", "--repeats", "2"])
    lines = _lines(capsys)
    assert [line["case"] for line in lines] == ["learn", "learn", "learn_fit"]
    assert [line["pop_size"] for line in lines[:2]] == [1, 2]
    assert all(line["one_by_one_ms"] > 0 and line["stacked_ms"] > 0 for line in lines[:2])
    assert lines[2]["implied_one_by_one_over_stacked"]["1"] == 1.0
