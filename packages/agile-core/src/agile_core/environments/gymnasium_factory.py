"""Vector environments from a `GymEnvSpec`: registered ids, entrypoints, files, wrappers.

Factories are plain picklable objects (no lambdas, no closures), so subprocess vector envs work
with the `spawn` start method: a child process rebuilds the environment from the spec alone.

Ids of optional families are registered on demand (``ALE/...`` imports ale-py); when their package
is missing, the error names the install command (:mod:`agile_core.environments.extras`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv, VectorEnv

from agile_core.environments.api_check import check_env
from agile_core.environments.extras import missing_extra_message, register_env_namespace
from agile_core.environments.images import looks_channels_last
from agile_core.environments.loading import EnvironmentBuildError, creator_in_file, import_target
from agile_core.specs.env import GymEnvSpec


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
                self._creator = creator_in_file(Path(self.base_dir) / spec.path, spec.entrypoint, gym.Env)
            elif spec.entrypoint is not None:
                self._creator = import_target(spec.entrypoint, "entrypoint")
        return self._creator

    def __call__(self) -> gym.Env:
        spec = GymEnvSpec.model_validate(self.spec)
        creator = self.creator()
        kwargs = dict(spec.config)
        if self.render_mode is not None:
            kwargs["render_mode"] = self.render_mode
        if creator is None:
            env = _make_registered(spec.name, kwargs)
        else:
            env = creator(**kwargs)
            if not isinstance(env, gym.Env):
                raise EnvironmentBuildError(
                    f"environment '{spec.name}': the entrypoint returned {type(env).__name__}, not a gymnasium.Env"
                )
        for index, wrapper in enumerate(spec.wrappers):
            wrap = import_target(wrapper.name, "wrappers")
            try:
                env = wrap(env, **wrapper.kwargs)
            except (gym.error.DependencyNotInstalled, ImportError) as exc:
                message = missing_extra_message(f"environment.wrappers[{index}]: {wrapper.name}", exc)
                if message is None:
                    raise
                raise EnvironmentBuildError(message) from None
        return env


def _register_namespace(name: str) -> None:
    """Register the namespace of the id `name` (``ALE/...``) or raise EnvironmentBuildError naming
    the install command of its package."""
    try:
        register_env_namespace(name)
    except ImportError as exc:
        raise EnvironmentBuildError(f"environment.name: {exc}") from None


def _build_error(name: str, exc: BaseException) -> EnvironmentBuildError:
    """The error for a registered id that cannot be made: the install command when an optional
    package is missing (no swig: Box2D comes as wheels), else Gymnasium's own message."""
    message = missing_extra_message(f"environment.name: '{name}'", exc)
    return EnvironmentBuildError(message or f"environment.name: cannot make '{name}': {exc}")


def _make_registered(name: str, kwargs: dict[str, Any]) -> gym.Env:
    """``gymnasium.make(name, **kwargs)``, its namespace registered first; errors name the field."""
    _register_namespace(name)
    try:
        return gym.make(name, **kwargs)
    except (gym.error.Error, ImportError) as exc:
        raise _build_error(name, exc) from None


def warn_if_channels_last(space: gym.Space, name: str, wrappers: str = "agile_core.environments.wrappers") -> None:
    """Warn that `space` looks channels-last and name the wrapper (in module `wrappers`) that fixes it."""
    if looks_channels_last(space):
        warnings.warn(
            f"environment '{name}': observations {space} look like channels-last [H, W, C] images, but the "
            f"CNN encoder reads [C, H, W]; add `{wrappers}:ChannelsFirst` to environment.wrappers (or "
            f"`{wrappers}:ImageObservation` to also downsample or grayscale them); see docs/environments.md",
            UserWarning, stacklevel=3)


def _has_native_vector(spec: GymEnvSpec) -> bool:
    if spec.is_custom:
        return False
    try:
        registered = gym.spec(spec.name)
    except gym.error.Error:
        return False
    return registered.vector_entry_point is not None


def _vector_wrappers(spec: GymEnvSpec) -> list[Any] | None:
    """The `vectorized` constructors of the spec's wrappers, innermost first, or None when one of
    them wraps only single environments."""
    found = []
    for wrapper in spec.wrappers:
        vectorized = getattr(import_target(wrapper.name, "wrappers"), "vectorized", None)
        if not callable(vectorized):
            return None
        found.append(vectorized)
    return found


def make_vector_env(spec: GymEnvSpec, base_dir: str | Path = ".", seed: int | None = None,
                    num_envs: int | None = None, render_mode: str | None = None,
                    check: bool = True) -> VectorEnv:
    """Build the vector env a manifest describes (Gymnasium's native vector implementation when
    the env has one and every wrapper asked for can wrap a vector env; otherwise sync or
    subprocess sub-envs)."""
    count = num_envs or spec.num_envs
    if not spec.is_custom:
        _register_namespace(spec.name)
    vector_wrappers = _vector_wrappers(spec) if _has_native_vector(spec) and spec.sync and render_mode is None else None
    if vector_wrappers is not None:
        try:
            env = gym.make_vec(spec.name, num_envs=count, vectorization_mode="vector_entry_point", **spec.config)
        except (gym.error.Error, ImportError) as exc:
            raise _build_error(spec.name, exc) from None
        for wrap, wrapper in zip(vector_wrappers, spec.wrappers, strict=True):
            env = wrap(env, **wrapper.kwargs)
        # how a population loop builds the same env with more sub-envs (one slice per agent)
        env.agile_widen = partial(make_vector_env, spec, base_dir, check=False)  # type: ignore[attr-defined]
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
    if check:
        warn_if_channels_last(env.single_observation_space, spec.name)
    if seed is not None:
        env.action_space.seed(seed)
    return env
