"""Capture and restore random number generator states in checkpoint-friendly form.

``capture_rng_state`` returns plain dicts of tensors, numpy arrays, ints and floats that
:func:`flatten_state` stores exactly. The ``*_generator_state`` helpers turn a
``numpy.random.Generator``'s bit generator state into JSON-native data (arbitrary precision
ints, arrays as tagged lists), so it can go into checkpoint metadata and round-trip exactly.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
_ARRAY_TAG = "__ndarray__"
_KNOWN_SOURCES = frozenset({"python", "numpy", "torch", "torch_cuda"})


def capture_rng_state(*, include_cuda: bool | None = None) -> dict[str, Any]:
    """Snapshot the global RNGs of ``random``, numpy, torch (CPU) and, optionally, CUDA.

    ``include_cuda=None`` captures CUDA states only if CUDA is already initialised (so a
    CPU-only process never creates a CUDA context); ``True`` forces it when available.
    """
    version, internal, gauss_next = random.getstate()
    algorithm, key, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": {
            "version": int(version),
            "internal": np.asarray(internal, dtype=np.uint32),
            "gauss_next": gauss_next,
        },
        "numpy": {
            "algorithm": str(algorithm),
            "key": np.array(key, dtype=np.uint32),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state().clone(),
    }
    if include_cuda is None:
        include_cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    if include_cuda and torch.cuda.is_available():
        state["torch_cuda"] = [s.clone() for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Restore the global RNGs from a :func:`capture_rng_state` snapshot (after a load too)."""
    unknown = set(state) - _KNOWN_SOURCES
    if unknown:
        raise ValueError(f"unknown RNG state entries {sorted(unknown)}")
    if "python" in state:
        py = state["python"]
        internal = tuple(int(x) for x in np.asarray(py["internal"]).tolist())
        gauss = py["gauss_next"]
        random.setstate((int(py["version"]), internal, None if gauss is None else float(gauss)))
    if "numpy" in state:
        npst = state["numpy"]
        np.random.set_state(
            (
                str(npst["algorithm"]),
                np.asarray(npst["key"], dtype=np.uint32),
                int(npst["pos"]),
                int(npst["has_gauss"]),
                float(npst["cached_gaussian"]),
            )
        )
    if "torch" in state:
        torch.set_rng_state(_byte_tensor(state["torch"]))
    if "torch_cuda" in state:
        _restore_cuda(list(state["torch_cuda"]))


def _restore_cuda(states: list[Any]) -> None:
    if not torch.cuda.is_available():
        warnings.warn(
            "checkpoint holds CUDA RNG states but CUDA is unavailable; not restored", stacklevel=3
        )
        return
    count = torch.cuda.device_count()
    if count != len(states):
        warnings.warn(
            f"checkpoint holds {len(states)} CUDA RNG states but {count} devices are visible; "
            "restoring the first min(both)",
            stacklevel=3,
        )
    for index, device_state in enumerate(states[:count]):
        torch.cuda.set_rng_state(_byte_tensor(device_state), index)


def _byte_tensor(value: Any) -> torch.Tensor:
    tensor = torch.as_tensor(value)
    if tensor.dtype != torch.uint8 or tensor.dim() != 1:
        raise ValueError("torch RNG state must be a 1-D uint8 tensor")
    return tensor.cpu()


def capture_generator_state(
    generator: np.random.Generator | np.random.BitGenerator,
) -> dict[str, Any]:
    """Return the bit generator state of ``generator`` as exact, JSON-native data."""
    bit_generator = (
        generator.bit_generator if isinstance(generator, np.random.Generator) else generator
    )
    return _to_json(bit_generator.state)


def restore_generator_state(
    generator: np.random.Generator | np.random.BitGenerator, state: Mapping[str, Any]
) -> None:
    """Set ``generator`` to a state from :func:`capture_generator_state` (same algorithm)."""
    bit_generator = (
        generator.bit_generator if isinstance(generator, np.random.Generator) else generator
    )
    expected = type(bit_generator).__name__
    if state.get("bit_generator") != expected:
        raise ValueError(
            f"state is for {state.get('bit_generator')!r}, generator uses {expected!r}"
        )
    bit_generator.state = _from_json(dict(state))


def generator_from_state(state: Mapping[str, Any]) -> np.random.Generator:
    """Build a new ``numpy.random.Generator`` positioned at ``state``."""
    name = state.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise ValueError(f"unsupported bit generator {name!r}; expected one of {_BIT_GENERATORS}")
    generator = np.random.Generator(getattr(np.random, name)())
    restore_generator_state(generator, state)
    return generator


def _to_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return {
            _ARRAY_TAG: value.dtype.str,
            "shape": list(value.shape),
            "data": value.reshape(-1).tolist(),
        }
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if _ARRAY_TAG in value:
            return np.array(value["data"], dtype=np.dtype(value[_ARRAY_TAG])).reshape(
                value["shape"]
            )
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value
