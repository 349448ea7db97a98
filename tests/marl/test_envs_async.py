"""AsyncPettingZooVecEnv (spawn subprocesses): the same results as the synchronous env."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agile_marl.envs import AsyncPettingZooVecEnv, PettingZooVecEnv, SubEnvError, make_vec_env
from agile_marl.specs.env import MultiAgentEnvSpec
from tests.marl.toy_envs import RaisingEnv, ToyHeteroEnv

REPO_ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(autouse=True)
def _workers_import_the_toy_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawned workers rebuild envs from `tests.marl.toy_envs` by import: they take the parent's
    sys.path, which under `uv run pytest` (importlib mode) lacks the repository root."""
    monkeypatch.syspath_prepend(REPO_ROOT)


def assert_same(x: Any, y: Any, where: str = "") -> None:
    """Equal nested dicts / lists / tuples of arrays and plain values."""
    assert type(x) is type(y), where
    if isinstance(x, dict):
        assert list(x) == list(y), where
        for key in x:
            assert_same(x[key], y[key], f"{where}[{key!r}]")
    elif isinstance(x, list | tuple):
        assert len(x) == len(y), where
        for index, (a, b) in enumerate(zip(x, y, strict=True)):
            assert_same(a, b, f"{where}[{index}]")
    elif isinstance(x, np.ndarray):
        assert x.dtype == y.dtype, where
        np.testing.assert_array_equal(x, y, err_msg=where)
    else:
        assert x == y, where


def test_toy_envs_match_sync_and_worker_errors_name_the_sub_env() -> None:
    fns = [functools.partial(ToyHeteroEnv, masks="info"),
           functools.partial(ToyHeteroEnv, a_steps=1, b_steps=3, b_truncates=True, masks="info"),
           functools.partial(RaisingEnv, fail_after=10, masks="info")]  # fails at the 12th vector step
    sync = PettingZooVecEnv(fns)
    parallel = AsyncPettingZooVecEnv(fns, num_workers=2)
    try:
        assert (parallel.agents, parallel.observation_spaces, parallel.action_spaces) == (
            sync.agents, sync.observation_spaces, sync.action_spaces)
        assert_same(sync.reset(seed=3), parallel.reset(seed=3), "reset")
        for step in range(11):
            actions = sync.sample_actions()
            assert_same(actions, parallel.sample_actions(), f"actions {step}")
            assert_same(sync.step(actions), parallel.step(actions), f"step {step}")
        for env in (sync, parallel):
            with pytest.raises(SubEnvError, match=r"sub-env 2: step\(\) raised RuntimeError: toy failure"):
                env.step(actions)
    finally:
        sync.close()
        parallel.close()
    assert not any(p.is_alive() for p in parallel._processes)


def test_mpe2_spread_matches_sync_through_autoresets() -> None:
    spec = MultiAgentEnvSpec(name="mpe2.simple_spread_v3", num_envs=3, config={"max_cycles": 10}, sync=False)
    parallel = make_vec_env(spec, seed=5)
    sync = make_vec_env(spec.model_copy(update={"sync": True}), seed=5, check=False)
    assert type(parallel) is AsyncPettingZooVecEnv
    try:
        assert_same(sync.reset(), parallel.reset(), "reset")
        autoresets = 0
        for step in range(30):
            actions = sync.sample_actions()
            result = sync.step(actions)
            assert_same(result, parallel.step(actions), f"step {step}")
            autoresets += int(result[4]["autoreset"].sum())
        assert autoresets == 6
    finally:
        sync.close()
        parallel.close()
