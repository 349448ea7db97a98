"""Tests for agile_core.logging: names, MetricsLogger, TensorBoard and CSV backends, factory."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from agile_core.logging import CsvBackend, MetricsLogger, build_logger
from agile_core.logging import metric_names as M
from agile_core.logging.backend import MetricsBackend

tb_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _accumulate(log_dir: Path):
    acc = tb_accumulator.EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _texts(acc, tag: str) -> list[tuple[int, str]]:
    from tensorboard.util import tensor_util

    return [
        (e.step, tensor_util.make_ndarray(e.tensor_proto)[0].decode()) for e in acc.Tensors(tag)
    ]


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


# --- metric names -----------------------------------------------------------------------------


def test_metric_name_constants_and_helpers() -> None:
    assert M.TRAIN_EPISODIC_RETURN == "train/episodic_return"
    assert M.TRAIN_EPISODE_LENGTH == "train/episode_length"
    assert M.TRAIN_LOSS == "train/loss"
    assert M.EVAL_MEAN_RETURN == "eval/mean_return"
    assert M.EVAL_BEST_FITNESS == "eval/best_fitness"
    assert M.HPO_MEAN_FITNESS == "hpo/mean_fitness"
    assert M.HPO_BEST_FITNESS == "hpo/best_fitness"
    assert M.HPO_MUTATION == "hpo/mutation"
    assert M.HPO_LINEAGE == "hpo/lineage"
    assert M.PERF_STEPS_PER_SECOND == "perf/steps_per_second"
    assert M.PERF_GLOBAL_STEPS == "perf/global_steps"
    assert M.train_loss("critic_loss") == "train/critic_loss"
    assert M.hpo_fitness(3) == "hpo/fitness/agent_3"
    assert M.hpo_hyperparameter("lr", 3) == "hpo/hyperparameters/lr/agent_3"
    assert M.mutation_text(3, "lr x1.2") == "agent_3: lr x1.2"
    assert M.lineage_text(1, 4) == "agent_1 -> agent_4"
    assert M.lineage_text(1, 4, "tournament") == "agent_1 -> agent_4: tournament"
    with pytest.raises(ValueError):
        M.hpo_hyperparameter("bad/name", 0)
    with pytest.raises(ValueError):
        M.hpo_fitness("a b")


def test_documented_names_match_specs_and_docstring() -> None:
    for name in [
        "train/episodic_return",
        "train/actor_loss",
        "hpo/fitness/agent_12",
        "hpo/hyperparameters/batch_size/agent_0",
        "perf/global_steps",
        "run/config",
    ]:
        assert M.is_documented(name), name
    for name in ["hpo/fitness/3", "hpo/hyperparameters/lr", "custom/thing", "train/a/b"]:
        assert not M.is_documented(name), name
    doc = M.__doc__ or ""
    for spec in M.METRICS:
        assert f"``{spec.name}``" in doc, spec.name
    table = M.metrics_markdown()
    assert table.count("\n") == len(M.METRICS) + 2
    assert "`hpo/hyperparameters/<name>/agent_<id>`" in table


# --- MetricsLogger ----------------------------------------------------------------------------


class _Recorder(MetricsBackend):
    def __init__(self, fail_close: bool = False) -> None:
        self.calls: list[tuple] = []
        self.fail_close = fail_close
        self.closed = False

    def log_scalars(self, step, metrics):
        self.calls.append(("scalars", step, dict(metrics)))

    def log_text(self, step, name, text):
        self.calls.append(("text", step, name, text))

    def log_hyperparameters(self, params):
        self.calls.append(("hparams", dict(params)))

    def close(self):
        self.closed = True
        if self.fail_close:
            raise OSError("disk full")


def test_logger_validates_and_fans_out() -> None:
    np = pytest.importorskip("numpy")
    a, b = _Recorder(), _Recorder()
    logger = MetricsLogger([a, b])
    logger.log_scalars(np.int64(5), {M.TRAIN_LOSS: np.float32(0.5), M.PERF_GLOBAL_STEPS: 5})
    logger.log_text(6, M.HPO_MUTATION, "agent_0: lr x2")
    logger.log_hyperparameters(
        {"lr": 1e-3, "wandb_api_key": "s3cr3t", "hub": {"hfToken": "t", "repo": "r"}}
    )
    assert a.calls == b.calls
    assert a.calls[0] == ("scalars", 5, {"train/loss": 0.5, "perf/global_steps": 5.0})
    assert isinstance(a.calls[0][2]["perf/global_steps"], float)
    assert a.calls[2] == ("hparams", {"lr": 1e-3, "hub": {"repo": "r"}})
    with pytest.raises(ValueError):
        logger.log_scalars(-1, {M.TRAIN_LOSS: 1.0})
    with pytest.raises(TypeError):
        logger.log_scalars(1.5, {M.TRAIN_LOSS: 1.0})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        logger.log_scalars(1, {M.TRAIN_LOSS: "high"})
    logger.close()
    assert a.closed and b.closed
    with pytest.raises(RuntimeError):
        logger.log_scalars(1, {M.TRAIN_LOSS: 1.0})
    logger.close()  # idempotent


def test_logger_population_helpers_and_strict_mode() -> None:
    rec = _Recorder()
    logger = MetricsLogger([rec], strict=True)
    logger.log_population(
        100, {0: 1.0, 1: 3.0, 2: float("nan")}, {0: {"lr": 1e-3}, 1: {"lr": 2e-3}}
    )
    logger.log_mutation(100, 1, "lr 1.0e-03 -> 2.0e-03")
    logger.log_lineage(100, 1, 2)
    _, step, metrics = rec.calls[0]
    assert step == 100
    assert metrics["hpo/fitness/agent_1"] == 3.0
    assert metrics[M.HPO_MEAN_FITNESS] == 2.0 and metrics[M.HPO_BEST_FITNESS] == 3.0
    assert metrics["hpo/hyperparameters/lr/agent_1"] == 2e-3
    assert rec.calls[1] == ("text", 100, "hpo/mutation", "agent_1: lr 1.0e-03 -> 2.0e-03")
    assert rec.calls[2] == ("text", 100, "hpo/lineage", "agent_1 -> agent_2")
    with pytest.raises(ValueError, match="not a documented"):
        logger.log_scalars(1, {"my/custom": 1.0})
    MetricsLogger([rec]).log_scalars(1, {"my/custom": 1.0})  # allowed when not strict


def test_logger_close_closes_all_and_reraises() -> None:
    bad, good = _Recorder(fail_close=True), _Recorder()
    with pytest.raises(OSError, match="disk full"), MetricsLogger([bad, good]):
        pass
    assert bad.closed and good.closed


def test_empty_logger_is_a_noop_and_run_id_none() -> None:
    with build_logger() as logger:
        logger.log_scalars(0, {M.TRAIN_LOSS: 1.0})
        assert logger.backends == () and logger.run_id is None


# --- TensorBoard ------------------------------------------------------------------------------


def test_tensorboard_writes_documented_names(tmp_path: Path) -> None:
    log_dir = tmp_path / "tb"
    with build_logger(tensorboard=True, tensorboard_log_dir=str(log_dir)) as logger:
        for step in (0, 100, 200):
            logger.log_scalars(
                step,
                {
                    M.TRAIN_EPISODIC_RETURN: step / 10,
                    M.TRAIN_LOSS: 1.0 / (step + 1),
                    M.PERF_STEPS_PER_SECOND: 1234.5,
                    M.PERF_GLOBAL_STEPS: step,
                },
            )
        logger.log_population(200, {0: 1.5, 1: 2.5}, {0: {"lr": 1e-3}, 1: {"lr": 3e-4}})
        logger.log_mutation(200, 1, "lr x0.3")
        logger.log_lineage(200, 0, 1)
        logger.log_hyperparameters(
            {"algo": "dqn", "lr": 1e-3, "net": {"hidden": [64, 64]}, "token": "xyz"}
        )

    acc = _accumulate(log_dir)
    scalars = set(acc.Tags()["scalars"])
    assert {
        "train/episodic_return",
        "train/loss",
        "perf/steps_per_second",
        "perf/global_steps",
        "hpo/fitness/agent_0",
        "hpo/fitness/agent_1",
        "hpo/mean_fitness",
        "hpo/best_fitness",
        "hpo/hyperparameters/lr/agent_0",
        "hpo/hyperparameters/lr/agent_1",
    } <= scalars
    returns = acc.Scalars(M.TRAIN_EPISODIC_RETURN)
    assert [e.step for e in returns] == [0, 100, 200]
    assert [e.value for e in returns] == pytest.approx([0.0, 10.0, 20.0])
    assert acc.Scalars(M.HPO_BEST_FITNESS)[0].value == pytest.approx(2.5)
    assert acc.Scalars("hpo/hyperparameters/lr/agent_1")[0].value == pytest.approx(3e-4)
    assert _texts(acc, M.HPO_MUTATION) == [(200, "agent_1: lr x0.3")]
    assert _texts(acc, M.HPO_LINEAGE) == [(200, "agent_0 -> agent_1")]
    config = _texts(acc, M.RUN_CONFIG)[0][1]
    assert "| net/hidden | [64, 64] |" in config and "xyz" not in config
    assert "_hparams_/session_start_info" in acc.Tags()["tensors"]


def test_tensorboard_resume_purges_and_continues(tmp_path: Path) -> None:
    log_dir = tmp_path / "tb"
    with build_logger(tensorboard=True, tensorboard_log_dir=str(log_dir)) as logger:
        for step in range(0, 60, 10):  # crashed at 50; last checkpoint was at step 30
            logger.log_scalars(step, {M.TRAIN_LOSS: float(step)})
    with build_logger(tensorboard=True, tensorboard_log_dir=str(log_dir), resume_step=30) as logger:
        for step in range(30, 80, 10):
            logger.log_scalars(step, {M.TRAIN_LOSS: 1000.0 + step})
    assert len(list(log_dir.glob("events.out.tfevents.*"))) == 2
    acc = _accumulate(log_dir)
    points = [(e.step, e.value) for e in acc.Scalars(M.TRAIN_LOSS)]
    assert points == [
        (0, 0.0),
        (10, 10.0),
        (20, 20.0),
        (30, 1030.0),
        (40, 1040.0),
        (50, 1050.0),
        (60, 1060.0),
        (70, 1070.0),
    ]


def test_tensorboard_resume_requires_log_dir() -> None:
    with pytest.raises(ValueError, match="tensorboard_log_dir"):
        build_logger(tensorboard=True, resume_step=10)


# --- CSV --------------------------------------------------------------------------------------


def test_csv_long_format_and_text_events(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "metrics.csv"
    with build_logger(csv_path=str(path)) as logger:
        logger.log_scalars(0, {M.TRAIN_LOSS: 0.25, M.EVAL_MEAN_RETURN: -3.5})
        logger.log_scalars(10, {M.HPO_BEST_FITNESS: 7.0})
        logger.log_mutation(10, 2, "batch_size 64 -> 128")
        logger.log_hyperparameters({"lr": 0.01, "secret": "nope"})
        # rows are flushed immediately: readable before close
        rows = _read_csv(path)
    assert list(rows[0]) == ["step", "name", "value", "wall_time"]
    assert [(r["step"], r["name"], float(r["value"])) for r in rows] == [
        ("0", "train/loss", 0.25),
        ("0", "eval/mean_return", -3.5),
        ("10", "hpo/best_fitness", 7.0),
    ]
    assert all(float(r["wall_time"]) > 1e9 for r in rows)
    events = _read_csv(tmp_path / "logs" / "metrics.events.csv")
    assert [(e["step"], e["name"], e["text"]) for e in events[:1]] == [
        ("10", "hpo/mutation", "agent_2: batch_size 64 -> 128")
    ]
    assert events[1]["name"] == "run/config" and json.loads(events[1]["text"]) == {"lr": 0.01}


def test_csv_append_after_reopen_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    with CsvBackend(path) as backend:
        for step in (0, 10, 20, 30):
            backend.log_scalars(step, {M.TRAIN_LOSS: float(step)})
    with CsvBackend(path) as backend:  # plain reopen: append, header not repeated
        backend.log_scalars(40, {M.TRAIN_LOSS: 40.0})
    with open(path, "a") as handle:  # a crash leaves a partial row behind
        handle.write("50,train/lo")
    with CsvBackend(path, resume_step=20) as backend:  # resume from the step-20 checkpoint
        backend.log_scalars(20, {M.TRAIN_LOSS: 200.0})
        backend.log_scalars(30, {M.TRAIN_LOSS: 300.0})
    text = path.read_text()
    assert text.count("step,name,value,wall_time") == 1
    rows = [(int(r["step"]), float(r["value"])) for r in _read_csv(path)]
    assert rows == [(0, 0.0), (10, 10.0), (20, 200.0), (30, 300.0)]


def test_csv_rejects_foreign_file(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="header"):
        CsvBackend(path)


# --- optional dependencies --------------------------------------------------------------------


def test_missing_tensorboard_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ["tensorboard", "torch.utils.tensorboard"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r'pip install "agile-core\[tensorboard\]"'):
        build_logger(
            tensorboard=True,
            tensorboard_log_dir=str(tmp_path / "tb"),
            csv_path=str(tmp_path / "m.csv"),
        )


def test_missing_wandb_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r'pip install "agile-core\[wandb\]"'):
        build_logger(wb=True, wandb_api_key="k" * 40, csv_path=str(tmp_path / "m.csv"))
    # the CSV backend opened before the failure was released; its file holds just the header
    assert (tmp_path / "m.csv").read_text() == "step,name,value,wall_time\n"
