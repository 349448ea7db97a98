"""The two entry points each scenario module exports: ``parallel_env(**config)`` (one sub-env, a
PettingZoo ParallelEnv) and ``vector_env(num_envs, seed=None, **config)`` (a `MPEVecEnv`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agile_marl.mpe.parallel import MPEParallelEnv
from agile_marl.mpe.scenario import Scenario
from agile_marl.mpe.vector import MPEVecEnv


def creators(scenario_type: type[Scenario[Any]], module: str) -> tuple[Callable[..., MPEParallelEnv],
                                                                       Callable[..., MPEVecEnv]]:
    """``(parallel_env, vector_env)`` for `scenario_type`, taking mpe2's keyword arguments."""
    name = scenario_type.name

    def parallel_env(**config: Any) -> MPEParallelEnv:
        return MPEParallelEnv(scenario_type.from_options(**config))

    def vector_env(num_envs: int, seed: int | None = None, copy: bool = True, **config: Any) -> MPEVecEnv:
        return MPEVecEnv(scenario_type.from_options(**config), num_envs, copy=copy, seed=seed)

    parallel_env.__doc__ = (f"{name} (mpe2's keyword arguments) as a PettingZoo ParallelEnv: one sub-env of "
                            "the batched MPE.")
    vector_env.__doc__ = (f"`num_envs` sub-envs of {name} (mpe2's keyword arguments) stepped as arrays in this "
                          "process; `seed` is the seed of the first reset (sub-env i gets seed + i).")
    for function in (parallel_env, vector_env):
        function.__module__ = module
        function.__qualname__ = function.__name__
    return parallel_env, vector_env
