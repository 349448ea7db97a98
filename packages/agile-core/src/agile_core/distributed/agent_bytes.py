"""Agents as bytes: the agent checkpoint (JSON metadata + safetensors tensors) in one buffer.

This is how agents move between the driver and Ray workers: one safetensors buffer whose
header metadata holds the agent's JSON description and the layout of its tensors. Nothing is
pickled; reading validates the buffer like reading a checkpoint directory does.
"""

from __future__ import annotations

import json
from typing import Any

from agile_core.checkpoint import CheckpointError

_METADATA_KEY = "agile_agent"
_HEADER_SIZE_BYTES = 8


def agent_to_bytes(agent: Any) -> bytes:
    """The whole agent (architecture, weights, optimizer, hyperparameters, counters, RNGs)."""
    import safetensors.torch

    from agile_core.algorithms.persistence import agent_state
    from agile_core.checkpoint import flatten_state

    meta, tensors = agent_state(agent)
    flat, skeleton = flatten_state(tensors)
    description = json.dumps({"meta": meta, "skeleton": skeleton}, separators=(",", ":"))
    return bytes(safetensors.torch.save(flat, metadata={_METADATA_KEY: description}))


def read_agent_bytes(data: bytes, device: str = "cpu") -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, tensors) of an agent buffer; CheckpointError when it is not one."""
    import safetensors.torch

    from agile_core.checkpoint import unflatten_state

    description = _description(data)
    try:
        flat = safetensors.torch.load(data)
    except Exception as exc:  # safetensors raises its own error types for damaged buffers
        raise CheckpointError("<agent bytes>", f"damaged safetensors buffer: {exc}") from exc
    tensors = unflatten_state(flat, description["skeleton"], device=device)
    return description["meta"], tensors


def agent_from_bytes(data: bytes, device: str = "cpu") -> Any:
    """A new agent rebuilt from `data` (only registered agile algorithms are imported)."""
    from agile_core.algorithms.base import EvolvableAlgorithm
    from agile_core.algorithms.persistence import algorithm_class, decode_argument, restore_agent

    meta, tensors = read_agent_bytes(data, device)
    klass = algorithm_class(str(meta["algorithm"]), EvolvableAlgorithm)
    arguments = decode_argument(meta["init_args"], device)
    if "device" in arguments:
        arguments["device"] = device
    agent = klass(**arguments)
    restore_agent(agent, meta, tensors)
    return agent


def load_agent_bytes(agent: Any, data: bytes) -> None:
    """Make `agent` (the same algorithm) exactly the agent `data` describes, in place."""
    from agile_core.algorithms.persistence import restore_agent

    meta, tensors = read_agent_bytes(data, str(agent.device))
    restore_agent(agent, meta, tensors)


def _description(data: bytes) -> dict[str, Any]:
    if len(data) < _HEADER_SIZE_BYTES:
        raise CheckpointError("<agent bytes>", "too short to be a safetensors buffer")
    size = int.from_bytes(data[:_HEADER_SIZE_BYTES], "little")
    try:
        header = json.loads(data[_HEADER_SIZE_BYTES:_HEADER_SIZE_BYTES + size])
        description = json.loads(header["__metadata__"][_METADATA_KEY])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError("<agent bytes>", f"not an agent buffer ({type(exc).__name__}: {exc})") from None
    if not isinstance(description, dict) or not {"meta", "skeleton"} <= set(description):
        raise CheckpointError("<agent bytes>", "agent buffer without meta and skeleton")
    return description
