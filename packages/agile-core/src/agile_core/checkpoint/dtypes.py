"""Dtype tables shared by the state codec and the safetensors reader.

``NATIVE_CODES`` maps the torch dtypes that are stored natively in safetensors to their
header codes. Other numeric torch dtypes (``complex128``, exotic float8 variants, ...) are
stored as raw little-endian bytes in a ``U8`` tensor and re-viewed on load.
"""

from __future__ import annotations

import torch

#: safetensors header code -> element size in bytes (codes this reader understands).
CODE_ITEMSIZE: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "C64": 8,
}

_CODE_TO_NAME: dict[str, str] = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "I16": "int16",
    "U16": "uint16",
    "F16": "float16",
    "BF16": "bfloat16",
    "I32": "int32",
    "U32": "uint32",
    "F32": "float32",
    "I64": "int64",
    "U64": "uint64",
    "F64": "float64",
    "C64": "complex64",
}

#: every dtype the torch build exposes, by short name ("float32", "complex128", ...).
TORCH_DTYPES: dict[str, torch.dtype] = {
    name: value for name in dir(torch) if isinstance(value := getattr(torch, name), torch.dtype)
}

#: safetensors header code -> torch dtype (only codes this torch build supports).
CODE_TO_TORCH: dict[str, torch.dtype] = {
    code: TORCH_DTYPES[name] for code, name in _CODE_TO_NAME.items() if name in TORCH_DTYPES
}

#: torch dtype -> safetensors header code, for dtypes stored natively.
NATIVE_CODES: dict[torch.dtype, str] = {dtype: code for code, dtype in CODE_TO_TORCH.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """Return the short, stable name of a torch dtype (``torch.float32`` -> ``"float32"``)."""
    return str(dtype).removeprefix("torch.")


def torch_dtype_from_name(name: object) -> torch.dtype | None:
    """Look a dtype up by its short name; ``None`` when unknown (never evaluates anything)."""
    if not isinstance(name, str):
        return None
    return TORCH_DTYPES.get(name)
