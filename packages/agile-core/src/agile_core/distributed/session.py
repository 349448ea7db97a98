"""Importing Ray on demand and holding a Ray connection for the length of a run."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agile_core.distributed.errors import BackendError
from agile_core.distributed.options import RayOptions

LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0}
"""Ray settings of a local instance: workers run at the driver's priority (Ray lowers it by
default, which starves them on a busy machine while the driver waits for them)."""

INSTALL_HINT = "install agile-core[ray] (pip install 'agile-core[ray]', or uv sync --extra ray)"


def import_ray() -> Any:
    """The `ray` module, or a BackendError naming the extra to install.

    Under `uv run`, Ray would start every worker through `uv run` as well (its uv integration,
    read when Ray is first imported); agile's workers use this interpreter's environment as it
    is, so that is off unless the user sets ``RAY_ENABLE_UV_RUN_RUNTIME_ENV`` themselves."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
    except ImportError:
        raise BackendError(f"backend ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


@contextmanager
def ray_session(options: RayOptions) -> Iterator[Any]:
    """Yield the `ray` module connected to a cluster.

    With `options.address` it attaches to that cluster; otherwise it starts a local instance
    (``options.num_cpus`` CPUs). Either way it disconnects at the end, which stops a local
    instance. When this process already called ``ray.init`` that connection is used as is and
    left open.
    """
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    try:
        if options.address is not None:
            ray.init(address=options.address, logging_level=logging.WARNING)
        else:
            ray.init(address="local", num_cpus=options.num_cpus, include_dashboard=False,
                     logging_level=logging.WARNING, _system_config=LOCAL_SYSTEM_CONFIG)
    except ConnectionError as exc:
        raise BackendError(f"ray backend: cannot reach the Ray cluster at {options.address!r}: {exc}") from None
    try:
        yield ray
    finally:
        ray.shutdown()
