"""Will a population's networks fit? Sizes a manifest allows once its user raises the bounds
(``hidden_size: [1000000]`` with ``max_mlp_nodes`` raised to match) are measured before any
weight is allocated: one member is built on torch's ``meta`` device (shapes, no memory) and its
parameters counted, so an impossible population fails at once, naming the limit, instead of
swapping for hours."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agile_core.buffers.memory import HEADROOM, available_memory, format_bytes

__all__ = ["BYTES_PER_PARAMETER", "LARGE_WIDTH", "check_population_fits", "widest_size"]

BYTES_PER_PARAMETER = 16
"""float32 weight, its gradient and Adam's two moments."""

LARGE_WIDTH = 1024
"""A network section with a size above this is measured (smaller ones always fit)."""


def widest_size(network: Mapping[str, Any] | None) -> int:
    """The largest size in a network section (hidden widths, latent_dim, channels...; not the
    min/max bounds of mutation)."""
    best = 0
    for key, value in (network or {}).items():
        if key.startswith(("min_", "max_")):
            continue
        if isinstance(value, Mapping):
            best = max(best, widest_size(value))
        elif isinstance(value, list | tuple):
            best = max([best, *(v for v in value if isinstance(v, int) and not isinstance(v, bool))])
        elif isinstance(value, int) and not isinstance(value, bool):
            best = max(best, value)
    return best


def _parameter_count(agent: Any) -> int:
    total = 0
    for name in agent.network_names:
        network = getattr(agent, name)
        modules = network.values() if isinstance(network, dict) else [network]
        total += sum(p.numel() for module in modules for p in module.parameters())
    return total


def check_population_fits(build_member: Callable[[str], Any], members: int) -> str | None:
    """A message when `members` agents built by ``build_member(device)`` would need more memory
    than this machine has available, else None (also when the meta build is not possible)."""
    import torch

    try:
        with torch.device("meta"):  # also the default of modules built without a device
            parameters = _parameter_count(build_member("meta"))
    except Exception:  # an algorithm that cannot be built on the meta device: nothing to measure
        return None
    needed = parameters * BYTES_PER_PARAMETER * members
    available = available_memory()
    if available is None or needed <= HEADROOM * available:
        return None
    return (f"the population's networks would need about {format_bytes(needed)} ({parameters:,} parameters per "
            f"member x {members} members, with gradients and optimizer state), but this machine has "
            f"{format_bytes(available)} available; lower the network sizes or training.pop_size")
