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


def space_to_dict(space: spaces.Space) -> dict[str, Any]:
    """A JSON description of a Gymnasium space (Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple)."""
    if isinstance(space, spaces.Box):
        return {"kind": "Box", "low": _bounds(space.low), "high": _bounds(space.high),
                "shape": list(space.shape), "dtype": str(space.dtype)}
    if isinstance(space, spaces.Discrete):
        return {"kind": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"kind": "MultiDiscrete", "nvec": space.nvec.tolist(), "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiBinary):
        return {"kind": "MultiBinary", "n": space.n if isinstance(space.n, int) else list(space.n)}
    if isinstance(space, spaces.Dict):
        return {"kind": "Dict", "spaces": {key: space_to_dict(sub) for key, sub in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"kind": "Tuple", "spaces": [space_to_dict(sub) for sub in space.spaces]}
    raise UnsupportedSpaceError(f"cannot serialise space {space_name(space)}")


def _bounds(values: Any) -> list[Any]:
    """Box bounds as a flat JSON list; infinities as the strings 'inf' / '-inf' (JSON has none)."""
    import numpy as np

    return [v if np.isfinite(v) else ("inf" if v > 0 else "-inf") for v in np.ravel(values).tolist()]


def space_from_dict(data: Mapping[str, Any]) -> spaces.Space:
    """Inverse of `space_to_dict`."""
    import numpy as np

    kind = data.get("kind")
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        low = np.asarray([float(v) for v in np.ravel(data["low"])], dtype=dtype).reshape(data["shape"])
        high = np.asarray([float(v) for v in np.ravel(data["high"])], dtype=dtype).reshape(data["shape"])
        return spaces.Box(low, high,
                          shape=tuple(data["shape"]), dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(data["nvec"]), dtype=np.dtype(data["dtype"]))
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "Dict":
        return spaces.Dict({key: space_from_dict(sub) for key, sub in data["spaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple(tuple(space_from_dict(sub) for sub in data["spaces"]))
    raise UnsupportedSpaceError(f"unknown space kind {kind!r} in checkpoint")
