"""Environment sections shared by the paradigms: Gymnasium (and the base every env spec extends)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from agile_core.specs._base import PrintableStr, Spec, field_error

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_ATTRIBUTE = re.compile(r"^[A-Za-z_][\w.]*$")
_DOTTED = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")


class WrapperSpec(Spec):
    """A wrapper applied to every sub-environment, innermost first."""

    name: str
    """Dotted path of the wrapper class, e.g. `gymnasium.wrappers.TimeLimit` (or `module:Class`)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the wrapper's constructor."""

    @field_validator("name")
    @classmethod
    def _dotted(cls, value: str) -> str:
        if not (_DOTTED.match(value) or _ENTRYPOINT.match(value)):
            raise ValueError("must be a dotted path such as 'gymnasium.wrappers.TimeLimit'")
        return value


class EnvSpec(Spec):
    """Base of every environment section: a name plus how many copies to run."""

    name: PrintableStr = Field(min_length=1)
    """Environment id (a registered id, or the name of a custom environment)."""
    num_envs: Annotated[int, Field(ge=1, le=65_536)] = 16
    """Sub-environments each agent steps in parallel (one vector environment per agent)."""

    def file_issues(self, base_dir: Path) -> list[tuple[tuple[str, ...], str, Any]]:
        """Problems with the files or modules this section names, found by reading them (never
        running them) relative to the manifest's folder `base_dir`: one ``(path, message,
        value)`` each, reported by validation with the line of the field. None by default."""
        return []


class CustomEnvSpec(EnvSpec):
    """Base of the environment sections that can name a custom environment by entrypoint or file,
    configure it and wrap it (Gymnasium and PettingZoo alike)."""

    entrypoint: str | None = None
    """Where the environment class or factory lives: `package.module:attr`; with `path`, just the
    attribute name inside that file."""
    path: str | None = None
    """Python file defining the environment (relative to the manifest); its `entrypoint`
    attribute, or the environment class it defines when no entrypoint is given."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the environment's constructor."""
    wrappers: list[WrapperSpec] = Field(default_factory=list)
    """Wrappers applied to each sub-environment (`wrapper(env, **kwargs)`), innermost first. A
    bare string is a wrapper with no arguments. When every wrapper has a `vectorized(env,
    **kwargs)` class method (as `agile_core.environments.wrappers:ObservationIndices` does), an
    environment with a native vector implementation keeps it and the wrappers wrap it whole."""
    sync: bool = True
    """Step sub-environments in this process (true) or in subprocesses (false: for slow envs)."""

    @field_validator("wrappers", mode="before")
    @classmethod
    def _bare_names(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": item} if isinstance(item, str) else item for item in value]
        return value

    @field_validator("path")
    @classmethod
    def _python_file(cls, value: str | None) -> str | None:
        if value is not None and not value.endswith(".py"):
            raise ValueError("must be a Python file ending in .py")
        return value

    @model_validator(mode="after")
    def _entrypoint_form(self) -> CustomEnvSpec:
        if self.entrypoint is None:
            return self
        if self.path is not None:
            if not _ATTRIBUTE.match(self.entrypoint):
                raise field_error("entrypoint", "with `path`, give only the attribute name inside that file")
        elif not _ENTRYPOINT.match(self.entrypoint):
            raise field_error("entrypoint", "must have the form 'package.module:attribute'")
        return self

    @property
    def is_custom(self) -> bool:
        """Whether the environment comes from an entrypoint or a file rather than its name."""
        return self.entrypoint is not None or self.path is not None


class GymEnvSpec(CustomEnvSpec):
    """A Gymnasium environment: a registered id (`gymnasium.make(name, **config)`), or a custom
    one by entrypoint or file path (its only `gymnasium.Env` subclass when no entrypoint is given)."""

    @field_validator("config")
    @classmethod
    def _episode_limit(cls, value: dict[str, Any]) -> dict[str, Any]:
        """`gymnasium.make`'s `max_episode_steps` (a TimeLimit) is a positive integer or null."""
        limit = value.get("max_episode_steps")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"max_episode_steps must be a positive integer or null, got {limit!r}")
        return value
