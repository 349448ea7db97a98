"""The multi-agent network section: one network section for every agent, or one per agent group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from agile_core.specs.network import NetworkSpec


class MultiAgentNetworkSpec(NetworkSpec):
    """A network section shared by every agent, plus optional sections keyed by agent group or
    agent id (``speaker: {latent_dim: 64}``, ``listener_0: {...}``); an agent uses its own id's
    section, else its group's, else the shared fields."""

    groups: dict[str, NetworkSpec] = Field(default_factory=dict)
    """Sections keyed by agent group (`speaker` for `speaker_0`) or agent id; written at the top
    level of `network` in a manifest."""

    @model_validator(mode="before")
    @classmethod
    def _keyed_sections(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        own = set(cls.model_fields) | {"arch"}  # `arch`: the shared section's encoder shorthand
        keyed = {key: value for key, value in data.items() if key not in own}
        if not keyed:
            return data
        return {**{key: value for key, value in data.items() if key in own},
                "groups": {**dict(data.get("groups") or {}), **keyed}}
