"""Vector environments from a `GymEnvSpec`: registered ids, entrypoints, files, wrappers.

Factories are plain picklable objects (no lambdas, no closures), so subprocess vector envs work
with the `spawn` start method: a child process rebuilds the environment from the spec alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv, VectorEnv

from agile_core.environments.api_check import check_env
from agile_core.specs.env import GymEnvSpec


class EnvironmentBuildError(ValueError):
    """An environment section that names something that cannot be built."""


def _import_attr(entrypoint: str) -> Any:
    module_name, _, attr = entrypoint.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvironmentBuildError(f"environment.entrypoint: cannot import module '{module_name}' ({exc})") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise EnvironmentBuildError(f"environment.entrypoint: module '{module_name}' has no attribute '{attr}'")
        target = getattr(target, part)
    return target


def _load_file(path: Path) -> Any:
    """Import a Python file as a module (once per process, under a stable name)."""
    name = f"agile_user_env_{abs(hash(str(path.resolve())))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EnvironmentBuildError(f"environment.path: cannot import '{path}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise EnvironmentBuildError(f"environment.path: importing '{path}' failed: {type(exc).__name__}: {exc}") from exc
    return module


def _env_from_file(path: Path, attribute: str | None) -> Any:
    module = _load_file(path)
    if attribute is not None:
        if not hasattr(module, attribute):
            raise EnvironmentBuildError(f"environment.entrypoint: '{path}' defines no '{attribute}'")
        return getattr(module, attribute)
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, gym.Env) and obj.__module__ == module.__name__]
    if len(found) != 1:
        names = ", ".join(cls.__name__ for cls in found) or "none"
        raise EnvironmentBuildError(
            f"environment.path: '{path}' must define exactly one gymnasium.Env subclass (found {names}); "
            "name the one to use with `entrypoint`"
        )
    return found[0]


@dataclass
class EnvFactory:
    """Builds one sub-environment from a spec; picklable so subprocess envs can use it."""

    spec: dict[str, Any]
    base_dir: str = "."
    render_mode: str | None = None
    _creator: Any = field(default=None, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "base_dir": self.base_dir, "render_mode": self.render_mode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def creator(self) -> Any:
        """The class or factory function the spec names (None for a registered id)."""
        if self._creator is None:
            spec = GymEnvSpec.model_validate(self.spec)
            if spec.path is not None:
                self._creator = _env_from_file(Path(self.base_dir) / spec.path, spec.entrypoint)
            elif spec.entrypoint is not None:
                self._creator = _import_attr(spec.entrypoint)
        return self._creator

    def __call__(self) -> gym.Env:
        spec = GymEnvSpec.model_validate(self.spec)
        creator = self.creator()
        kwargs = dict(spec.config)
        if self.render_mode is not None:
            kwargs["render_mode"] = self.render_mode
        if creator is None:
            try:
                env = gym.make(spec.name, **kwargs)
            except gym.error.Error as exc:
                raise EnvironmentBuildError(f"environment.name: cannot make '{spec.name}': {exc}") from None
        else:
            env = creator(**kwargs)
            if not isinstance(env, gym.Env):
                raise EnvironmentBuildError(
                    f"environment '{spec.name}': the entrypoint returned {type(env).__name__}, not a gymnasium.Env"
                )
        for wrapper in spec.wrappers:
            module, _, attr = wrapper.name.rpartition(".") if ":" not in wrapper.name else ("", "", "")
            target = _import_attr(wrapper.name if ":" in wrapper.name else f"{module}:{attr}")
            env = target(env, **wrapper.kwargs)
        return env


def _has_native_vector(spec: GymEnvSpec) -> bool:
    if spec.is_custom or spec.wrappers:
        return False
    try:
        registered = gym.spec(spec.name)
    except gym.error.Error:
        return False
    return registered.vector_entry_point is not None


def make_vector_env(spec: GymEnvSpec, base_dir: str | Path = ".", seed: int | None = None,
                    num_envs: int | None = None, render_mode: str | None = None,
                    check: bool = True) -> VectorEnv:
    """Build the vector env a manifest describes (Gymnasium's native vector implementation when
    the env has one and no wrappers are asked for; otherwise sync or subprocess sub-envs)."""
    count = num_envs or spec.num_envs
    if _has_native_vector(spec) and spec.sync and render_mode is None:
        env = gym.make_vec(spec.name, num_envs=count, vectorization_mode="vector_entry_point", **spec.config)
    else:
        factory = EnvFactory(spec.model_dump(mode="json"), str(base_dir), render_mode)
        if check and spec.is_custom:
            probe = factory()  # fail here, in the parent, with a clear error
            try:
                check_env(probe, spec.name)
            finally:
                probe.close()
        factories = [factory] * count
        env = SyncVectorEnv(factories) if spec.sync else AsyncVectorEnv(factories, context="spawn")
    if seed is not None:
        env.action_space.seed(seed)
    return env
