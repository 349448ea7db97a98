"""Parallel environments and vector envs from a `MultiAgentEnvSpec`.

The factory is a ``functools.partial`` of :func:`build_parallel_env` with plain arguments, so a
``spawn`` subprocess rebuilds the environment from it alone (no lambdas, no closures).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pettingzoo import ParallelEnv

from agile_core.environments.gymnasium_factory import warn_if_channels_last
from agile_core.environments.images import looks_channels_last
from agile_core.environments.loading import (
    EnvironmentBuildError,
    creator_in_file,
    import_module,
    import_target,
)

if TYPE_CHECKING:
    from agile_marl.envs.vector import MultiAgentVecEnv
    from agile_marl.specs.env import MultiAgentEnvSpec


MultiAgentEnvBuildError = EnvironmentBuildError
"""An environment section that names something that cannot be built (core's error)."""


def resolve_creator(name: str, entrypoint: str | None = None, path: str | None = None,
                    base_dir: str | None = None) -> Callable[..., Any]:
    """The class or function the environment section names (raises MultiAgentEnvBuildError)."""
    if path is not None:
        return creator_in_file(Path(base_dir or ".") / path, entrypoint, ParallelEnv, functions=("parallel_env",))
    if entrypoint is not None:
        creator = import_target(entrypoint, "entrypoint")
    else:
        module = import_module(name, "name")
        creator = getattr(module, "parallel_env", None)
        if creator is None:
            raise MultiAgentEnvBuildError(
                f"environment.name: module '{name}' has no parallel_env(); name a PettingZoo environment "
                "module such as 'mpe2.simple_spread_v3', or give `entrypoint`"
            )
    if not callable(creator):
        field = "entrypoint" if entrypoint is not None else "name"
        raise MultiAgentEnvBuildError(f"environment.{field}: '{entrypoint or name}' is not callable")
    return creator


def _looks_parallel(env: Any) -> bool:
    return all(hasattr(env, attr) for attr in ("possible_agents", "reset", "step", "observation_space", "action_space"))


def build_parallel_env(name: str, entrypoint: str | None = None, path: str | None = None,
                       config: Mapping[str, Any] | None = None,
                       wrappers: Sequence[tuple[str, Mapping[str, Any]]] = (),
                       base_dir: str | None = None) -> ParallelEnv:
    """Build one parallel env: the creator called with `config`, then each wrapper, innermost first."""
    creator = resolve_creator(name, entrypoint, path, base_dir)
    env = creator(**dict(config or {}))
    if not _looks_parallel(env):
        field = "name" if entrypoint is None and path is None else "entrypoint"
        raise MultiAgentEnvBuildError(
            f"environment.{field}: '{name}' built a {type(env).__name__}, not a PettingZoo ParallelEnv "
            "(possible_agents, reset, step, observation_space, action_space)"
        )
    for index, (wrapper, kwargs) in enumerate(wrappers):
        env = import_target(wrapper, f"wrappers[{index}].name")(env, **dict(kwargs))
    return env


def make_env_factory(spec: MultiAgentEnvSpec, base_dir: str | Path | None = None) -> Callable[[], ParallelEnv]:
    """A picklable zero-argument factory of the spec's parallel env.

    The creator and the wrappers are imported here, so a missing module, attribute or file
    raises MultiAgentEnvBuildError now, naming the spec field.
    """
    base = None if base_dir is None else str(base_dir)
    resolve_creator(spec.name, spec.entrypoint, spec.path, base)
    wrappers = tuple((w.name, dict(w.kwargs)) for w in spec.wrappers)
    for index, (wrapper, _) in enumerate(wrappers):
        import_target(wrapper, f"wrappers[{index}].name")
    return functools.partial(build_parallel_env, spec.name, spec.entrypoint, spec.path, dict(spec.config),
                             wrappers, base)


def native_vector_creator(spec: MultiAgentEnvSpec) -> Callable[..., Any] | None:
    """The named module's own ``vector_env(num_envs, seed=None, **config)`` (a batched vector env,
    such as `agile_marl.mpe.simple_spread_v3`'s), or None: for custom envs (entrypoint or path),
    with wrappers (they wrap single envs), with ``sync: false``, or when the module has none."""
    if spec.is_custom or spec.wrappers or not spec.sync:
        return None
    creator = getattr(import_module(spec.name, "name"), "vector_env", None)
    return creator if callable(creator) else None


def make_vec_env(spec: MultiAgentEnvSpec, num_envs: int | None = None, seed: int | None = None,
                 base_dir: str | Path | None = None, check: bool = True) -> MultiAgentVecEnv:
    """The vector env a manifest describes: `num_envs` (default `spec.num_envs`) sub-envs, in
    this process (`spec.sync`) or in spawn subprocesses.

    When the named module has a native ``vector_env`` (see :func:`native_vector_creator`), that
    vector env is used: it steps all sub-envs as arrays, always in this process. Otherwise each
    sub-env is a ``parallel_env`` from the factory (`PettingZooVecEnv`, or
    `AsyncPettingZooVecEnv` with ``sync: false``).

    With `check`, a fresh env from the factory is checked first (then closed). A `seed` seeds the
    vector env's action spaces and is the seed of its first ``reset()`` called without one.
    """
    from agile_marl.envs.async_vector import AsyncPettingZooVecEnv
    from agile_marl.envs.checks import check_parallel_env
    from agile_marl.envs.vector import MultiAgentVecEnv, PettingZooVecEnv

    factory = make_env_factory(spec, base_dir)
    if check:
        check_parallel_env(factory, spec.name)
    count = num_envs or spec.num_envs
    native = native_vector_creator(spec)
    env: MultiAgentVecEnv
    if native is not None:
        env = native(count, seed=seed, **dict(spec.config))
        if not isinstance(env, MultiAgentVecEnv):
            raise MultiAgentEnvBuildError(f"environment.name: '{spec.name}'.vector_env() built a "
                                          f"{type(env).__name__}, not a MultiAgentVecEnv")
    else:
        factories = [factory] * count
        env = PettingZooVecEnv(factories, seed=seed) if spec.sync else AsyncPettingZooVecEnv(factories, seed=seed)
    if check:
        for agent, space in env.observation_spaces.items():
            if looks_channels_last(space):
                warn_if_channels_last(space, f"{spec.name}' agent '{agent}", "agile_marl.envs.wrappers")
                break
    return env
