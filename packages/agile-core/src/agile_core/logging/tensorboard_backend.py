"""TensorBoard event-file backend, written with tensorboard's own protobufs (no TensorFlow, no torch)."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from ._optional import require
from ._params import flatten_params
from .backend import MetricsBackend
from .metric_names import RUN_CONFIG

_EVENT_FILE = re.compile(r"tfevents\.(\d+)\.")
_file_counter = 0
_counter_lock = threading.Lock()


def _next_file_number() -> int:
    global _file_counter
    with _counter_lock:
        _file_counter += 1
        return _file_counter


def _event_file_name(log_dir: Path) -> Path:
    """A new event-file name that sorts after every event file already in ``log_dir``.

    TensorBoard reads the files of a run in name order, so a resumed run's file
    must come last for its purge marker to discard the orphaned steps.
    """
    stamp = int(time.time())
    for existing in log_dir.iterdir():
        match = _EVENT_FILE.search(existing.name)
        if match:
            stamp = max(stamp, int(match.group(1)) + 1)
    name = f"events.out.tfevents.{stamp:010d}.{socket.gethostname()}.{os.getpid()}.{_next_file_number()}.agile"
    return log_dir / name


def _markdown_table(params: Mapping[str, Any]) -> str:
    rows = ["| name | value |", "| --- | --- |"]
    rows += [f"| {name} | {value} |" for name, value in params.items()]
    return "\n".join(rows)


class TensorBoardBackend(MetricsBackend):
    """Writes scalars, text and hyperparameters to a TensorBoard event file in ``log_dir``.

    Each backend writes one new event file.  When ``resume_step`` is greater than
    zero a *purge* marker (``SessionLog.START`` at ``resume_step``) is written first,
    so TensorBoard drops the steps ``>= resume_step`` that the interrupted run
    wrote after its last checkpoint and the curves continue without duplicates.
    Requires the ``tensorboard`` package (``pip install "agile-core[tensorboard]"``).
    """

    def __init__(self, log_dir: str | os.PathLike[str], *, resume_step: int = 0) -> None:
        require("tensorboard", package="tensorboard", extra="tensorboard")
        self._event_pb2 = require(
            "tensorboard.compat.proto.event_pb2", package="tensorboard", extra="tensorboard"
        )
        self._summary_pb2 = require(
            "tensorboard.compat.proto.summary_pb2", package="tensorboard", extra="tensorboard"
        )
        record_writer = require(
            "tensorboard.summary.writer.record_writer", package="tensorboard", extra="tensorboard"
        )
        self._log_dir = Path(log_dir)
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self._resume_step = int(resume_step)
        self._path = _event_file_name(self._log_dir)
        self._file: IO[bytes] = open(self._path, "wb")  # noqa: SIM115 - kept open for the run
        self._writer = record_writer.RecordWriter(self._file)
        self._lock = threading.Lock()
        self._closed = False
        self._write(
            self._event_pb2.Event(
                wall_time=time.time(), step=self._resume_step, file_version="brain.Event:2"
            )
        )
        if self._resume_step > 0:
            session_log = self._event_pb2.SessionLog(status=self._event_pb2.SessionLog.START)
            self._write(
                self._event_pb2.Event(
                    wall_time=time.time(), step=self._resume_step, session_log=session_log
                )
            )
        self.flush()

    @property
    def log_dir(self) -> Path:
        """Directory of the TensorBoard run."""
        return self._log_dir

    @property
    def event_file(self) -> Path:
        """The event file this backend writes."""
        return self._path

    def _write(self, event: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("TensorBoardBackend is closed")
            self._writer.write(event.SerializeToString())

    def _write_summary(self, step: int, values: list[Any]) -> None:
        summary = self._summary_pb2.Summary(value=values)
        self._write(self._event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def log_scalars(self, step: int, metrics: Mapping[str, float]) -> None:
        """Write one scalar summary per metric at ``step``."""
        if not metrics:
            return
        values = [
            self._summary_pb2.Summary.Value(tag=name, simple_value=value)
            for name, value in metrics.items()
        ]
        self._write_summary(step, values)
        self.flush()

    def log_text(self, step: int, name: str, text: str) -> None:
        """Write a text summary (shown in TensorBoard's Text tab) at ``step``."""
        text_metadata = require(
            "tensorboard.plugins.text.metadata", package="tensorboard", extra="tensorboard"
        )
        tensor_util = require(
            "tensorboard.util.tensor_util", package="tensorboard", extra="tensorboard"
        )
        value = self._summary_pb2.Summary.Value(
            tag=name,
            metadata=text_metadata.create_summary_metadata(display_name=name, description=""),
            tensor=tensor_util.make_tensor_proto([text.encode("utf-8")], shape=(1,)),
        )
        self._write_summary(step, [value])
        self.flush()

    def log_hyperparameters(self, params: Mapping[str, Any]) -> None:
        """Write the configuration as an HParams session and as a Markdown table under ``run/config``."""
        flat = flatten_params(params)
        hp_metadata = require(
            "tensorboard.plugins.hparams.metadata", package="tensorboard", extra="tensorboard"
        )
        hp_data = require(
            "tensorboard.plugins.hparams.plugin_data_pb2",
            package="tensorboard",
            extra="tensorboard",
        )
        start = hp_data.SessionStartInfo(start_time_secs=time.time())
        for name, value in flat.items():
            if isinstance(value, bool):
                start.hparams[name].bool_value = value
            elif isinstance(value, int | float):
                start.hparams[name].number_value = float(value)
            else:
                start.hparams[name].string_value = str(value)
        hparams_value = self._summary_pb2.Summary.Value(
            tag=hp_metadata.SESSION_START_INFO_TAG,
            metadata=hp_metadata.create_summary_metadata(
                hp_data.HParamsPluginData(session_start_info=start)
            ),
            tensor=hp_metadata.NULL_TENSOR,
        )
        self._write_summary(self._resume_step, [hparams_value])
        self.log_text(self._resume_step, RUN_CONFIG, _markdown_table(flat))

    def flush(self) -> None:
        """Flush the event file to the operating system."""
        with self._lock:
            if not self._closed:
                self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._writer.flush()
            self._writer.close()
