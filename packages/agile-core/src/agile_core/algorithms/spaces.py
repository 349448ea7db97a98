"""Agents declare the Gymnasium spaces they support and reject others at construction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymnasium import spaces


class UnsupportedSpaceError(TypeError):
    """An observation or action space the algorithm cannot handle."""


def space_name(space: Any) -> str:
    """`Box(4,)`, `Discrete(2)`... for messages."""
    if isinstance(space, spaces.Box):
        return f"Box{tuple(space.shape)}"
    if isinstance(space, spaces.Discrete):
        return f"Discrete({space.n})"
    return type(space).__name__


def check_space(algorithm: str, role: str, space: Any, supported: tuple[type[spaces.Space], ...]) -> None:
    """Raise UnsupportedSpaceError naming the algorithm, the role and the supported kinds."""
    if not isinstance(space, spaces.Space):
        raise UnsupportedSpaceError(
            f"{algorithm}: {role} must be a gymnasium.spaces.Space, got {type(space).__name__}"
        )
    if supported and not isinstance(space, supported):
        kinds = ", ".join(kind.__name__ for kind in supported)
        raise UnsupportedSpaceError(
            f"{algorithm} does not support {role} {space_name(space)}; supported: {kinds}"
        )


def check_agent_spaces(algorithm: str, role: str, per_agent: Mapping[str, Any],
                       supported: tuple[type[spaces.Space], ...]) -> None:
    """Check every sub-agent's space of a multi-agent algorithm."""
    if not per_agent:
        raise UnsupportedSpaceError(f"{algorithm}: {role} needs one space per agent id, got none")
    for agent_id, space in per_agent.items():
        check_space(algorithm, f"{role} of agent '{agent_id}'", space, supported)
