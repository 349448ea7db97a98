"""The `environment` section of multi-agent manifests: a PettingZoo Parallel environment."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from agile_core.specs._base import field_error
from agile_core.specs.env import EnvSpec, WrapperSpec

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_ATTRIBUTE = re.compile(r"^[A-Za-z_][\w.]*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class MultiAgentEnvSpec(EnvSpec):
    """A PettingZoo Parallel environment: an env module, or a custom one by entrypoint or file."""

    name: str = Field(min_length=1)
    """Module whose `parallel_env(**config)` builds the environment, e.g.
    `mpe2.simple_speaker_listener_v4`; with `entrypoint` or `path`, just a display name."""
    entrypoint: str | None = None
    """Where a ParallelEnv class or factory lives: `package.module:attr`; with `path`, just the
    attribute name inside that file."""
    path: str | None = None
    """Python file defining the environment (relative to the manifest); its `entrypoint`
    attribute, else its `parallel_env` function, else its single ParallelEnv subclass."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the environment's constructor (`parallel_env(**config)`)."""
    wrappers: list[WrapperSpec] = Field(default_factory=list)
    """Wrappers applied to each parallel env (PettingZoo or SuperSuit style: `wrapper(env,
    **kwargs)`), innermost first. A bare string is a wrapper with no arguments."""
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
    def _name_or_entrypoint(self) -> MultiAgentEnvSpec:
        if self.entrypoint is not None:
            if self.path is not None:
                if not _ATTRIBUTE.match(self.entrypoint):
                    raise field_error("entrypoint", "with `path`, give only the attribute name inside that file")
            elif not _ENTRYPOINT.match(self.entrypoint):
                raise field_error("entrypoint", "must have the form 'package.module:attribute'")
        elif self.path is None and not _MODULE.match(self.name):
            raise field_error(
                "name",
                "must be a module path such as 'mpe2.simple_spread_v3' (whose parallel_env() builds "
                "the environment), or give `entrypoint` or `path`",
            )
        return self

    @property
    def is_custom(self) -> bool:
        """Whether the environment comes from an entrypoint or a file rather than an env module."""
        return self.entrypoint is not None or self.path is not None
