"""A private local Ray instance (2 CPUs, own temp dir) shared by this folder's tests in one process."""

import logging
import os
import shutil
import tempfile

import pytest

from agile_core.distributed.session import LOCAL_SYSTEM_CONFIG


@pytest.fixture(scope="session")
def ray_instance():
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # as agile's import_ray does
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # pragma: no cover - another fixture or test left one open
        ray.shutdown()
    # a short path of its own: Ray's socket paths under it must stay within the 107-byte AF_UNIX
    # limit, which pytest's tmp_path (deeper under xdist) can exceed
    temp_dir = tempfile.mkdtemp(prefix="agray-")
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2,
             logging_level=logging.WARNING, _temp_dir=temp_dir, _system_config=LOCAL_SYSTEM_CONFIG)
    yield ray
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)
