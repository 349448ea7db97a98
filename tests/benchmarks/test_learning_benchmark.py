"""The pure parts of benchmarks/learning.py: seed overrides, per-seed figures, the summary."""

import importlib.util
import math
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "learning.py"
spec = importlib.util.spec_from_file_location("learning_benchmark", PATH)
assert spec is not None and spec.loader is not None
learning = importlib.util.module_from_spec(spec)
spec.loader.exec_module(learning)


def test_seed_overrides_vary_training_and_mutation_seeds():
    assert learning.seed_overrides(3, has_mutation=True, keep_rand_seed=False) == [
        "training.seed=3", "mutation.rand_seed=3"]
    assert learning.seed_overrides(3, has_mutation=True, keep_rand_seed=True) == ["training.seed=3"]
    assert learning.seed_overrides(3, has_mutation=False, keep_rand_seed=False) == ["training.seed=3"]


def test_seed_result_finds_the_first_generation_at_the_threshold():
    curve = [[10_000, 120.0], [20_000, 480.0], [30_000, 90.0], [40_000, 500.0]]
    result = learning.seed_result(7, curve, 475.0, 12.5)
    assert result == {"seed": 7, "best_ever": 500.0, "final_best": 500.0, "steps_per_agent_to_threshold": 20_000,
                      "reached": True, "wall_s": 12.5, "generations": 4}
    missed = learning.seed_result(1, [[10_000, 20.0], [20_000, 474.9]], 475.0, 1.0)
    assert missed["steps_per_agent_to_threshold"] is None and not missed["reached"]
    assert missed["best_ever"] == 474.9 and missed["final_best"] == 474.9
    no_threshold = learning.seed_result(1, [[10_000, 20.0]], None, 1.0)
    assert no_threshold["reached"] is False


def test_seed_result_ignores_nan_for_best_ever():
    result = learning.seed_result(0, [[1, math.nan], [2, 3.0]], 5.0, 0.0)
    assert result["best_ever"] == 3.0


def _seed(steps):
    return {"reached": steps is not None, "steps_per_agent_to_threshold": steps, "best_ever": 1.0, "wall_s": 2.0}


def test_summary_counts_failures_as_never_reaching():
    summary = learning.summarize([_seed(30_000), _seed(None), _seed(10_000), _seed(20_000), _seed(None)], 475.0)
    assert summary["successes"] == 3 and summary["success_rate"] == 0.6
    assert summary["median_steps_to_threshold"] == 30_000
    assert summary["steps_to_threshold"] == [10_000, 20_000, 30_000]
    assert summary["wall_s"] == 10.0


def test_summary_median_is_null_when_most_seeds_fail():
    summary = learning.summarize([_seed(10_000), _seed(None), _seed(None)], 1.0)
    assert summary["success_rate"] == pytest.approx(1 / 3, abs=1e-3)
    assert summary["median_steps_to_threshold"] is None


def test_summary_counts_errors_as_failures():
    summary = learning.summarize([_seed(10_000), {"seed": 1, "error": ["boom"]}], 1.0)
    assert summary["errors"] == 1 and summary["success_rate"] == 0.5


def test_parse_args_defaults_and_checks():
    args = learning.parse_args(["m.yaml"])
    assert args.seeds == 5 and args.jobs >= 1 and args.threshold is None and not args.stop_at_threshold
    args = learning.parse_args(["m.yaml", "--seeds", "3", "--jobs", "1", "--threshold", "475", "--set", "a.b=1"])
    assert (args.seeds, args.jobs, args.threshold, args.overrides) == (3, 1, 475.0, ["a.b=1"])
    with pytest.raises(SystemExit):
        learning.parse_args(["m.yaml", "--seeds", "0"])
