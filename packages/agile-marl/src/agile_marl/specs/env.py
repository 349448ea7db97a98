"""The `environment` section of multi-agent manifests: a PettingZoo Parallel environment."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from agile_core.specs._base import PrintableStr, field_error
from agile_core.specs.env import CustomEnvSpec

_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class MultiAgentEnvSpec(CustomEnvSpec):
    """A PettingZoo Parallel environment: an env module whose `parallel_env(**config)` builds it,
    or a custom one by entrypoint or file (a ParallelEnv class or factory; in a file, its
    `parallel_env` or its only ParallelEnv subclass). Wrappers are PettingZoo or SuperSuit style."""

    name: PrintableStr = Field(min_length=1)
    """Module whose `parallel_env(**config)` builds the environment, e.g.
    `mpe2.simple_speaker_listener_v4`; with `entrypoint` or `path`, just a display name."""

    @model_validator(mode="after")
    def _module_name(self) -> MultiAgentEnvSpec:
        if not self.is_custom and not _MODULE.match(self.name):
            raise field_error(
                "name",
                "must be a module path such as 'mpe2.simple_spread_v3' (whose parallel_env() builds "
                "the environment), or give `entrypoint` or `path`",
            )
        return self
