"""Strict safetensors header validation, streaming tensor reads and durable writes.

A safetensors file is ``u64 little-endian header length N`` + ``N`` bytes of UTF-8 JSON +
the raw tensor data. ``read_header`` checks all of it against the file size before any
tensor byte is touched, so a pickle payload, a truncated file or garbage is refused with a
``CheckpointError``. Tensors are then read with ``pread`` straight into freshly allocated
tensor memory (no mmap, no pickle, nothing executed), hashing the bytes on the way.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import sys
from dataclasses import dataclass
from typing import Any

import safetensors.torch
import torch

from agile_core.checkpoint.dtypes import CODE_ITEMSIZE, CODE_TO_TORCH
from agile_core.checkpoint.errors import CheckpointError
from agile_core.checkpoint.jsonio import strict_loads

#: the reference implementation refuses larger headers as well.
MAX_HEADER_BYTES = 100 * 1024 * 1024
_READ_CHUNK = 1 << 30


@dataclass(frozen=True)
class TensorEntry:
    """One tensor listed in a safetensors header."""

    name: str
    code: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class SafetensorsHeader:
    """A validated header: entries sorted by offset, plus where the data region starts."""

    entries: tuple[TensorEntry, ...]
    metadata: dict[str, str]
    header_bytes: bytes
    data_start: int
    file_size: int

    def by_name(self) -> dict[str, TensorEntry]:
        """Return the entries keyed by tensor name."""
        return {entry.name: entry for entry in self.entries}


def read_header(fd: int, path: str) -> SafetensorsHeader:
    """Read and validate the header of the open safetensors file ``fd`` (``path`` for errors)."""
    _require_little_endian()
    file_size = os.fstat(fd).st_size
    if file_size < 8:
        raise CheckpointError(path, f"not a safetensors file: only {file_size} bytes long")
    prefix = os.pread(fd, 8, 0)
    (length,) = struct.unpack("<Q", prefix)
    if length < 2 or length > MAX_HEADER_BYTES or length > file_size - 8:
        raise CheckpointError(
            path,
            f"not a safetensors file: header length {length} is impossible for a file of "
            f"{file_size} bytes (truncated, or some other format such as a pickle)",
        )
    raw = _pread_all(fd, length, 8, path)
    if raw[:1] != b"{":
        raise CheckpointError(path, "not a safetensors file: header is not a JSON object")
    try:
        parsed = strict_loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(path, f"not a safetensors file: bad header JSON ({exc})") from exc
    if not isinstance(parsed, dict):
        raise CheckpointError(path, "not a safetensors file: header is not a JSON object")
    metadata = parsed.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise CheckpointError(path, "safetensors __metadata__ must map strings to strings")
    entries = sorted((_entry(name, spec, path) for name, spec in parsed.items()), key=_order)
    position = 0
    for entry in entries:
        if entry.begin != position:
            raise CheckpointError(
                path, f"tensor {entry.name!r} data does not start at byte {position}"
            )
        position = entry.end
    data_start = 8 + length
    if data_start + position != file_size:
        raise CheckpointError(
            path,
            f"file is {file_size} bytes but its header describes {data_start + position} "
            "(truncated or has trailing garbage)",
        )
    return SafetensorsHeader(tuple(entries), metadata, prefix + raw, data_start, file_size)


def _order(entry: TensorEntry) -> tuple[int, int]:
    return entry.begin, entry.end


def _entry(name: str, spec: Any, path: str) -> TensorEntry:
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
        raise CheckpointError(path, f"malformed header entry for tensor {name!r}")
    code, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    if code not in CODE_ITEMSIZE or code not in CODE_TO_TORCH:
        raise CheckpointError(path, f"tensor {name!r} has unsupported dtype {code!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise CheckpointError(path, f"tensor {name!r} has a malformed shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int and o >= 0 for o in offsets)
        or offsets[1] < offsets[0]
    ):
        raise CheckpointError(path, f"tensor {name!r} has malformed data_offsets {offsets!r}")
    if offsets[1] - offsets[0] != math.prod(shape) * CODE_ITEMSIZE[code]:
        raise CheckpointError(path, f"tensor {name!r}: data_offsets do not match dtype and shape")
    return TensorEntry(name, code, tuple(shape), offsets[0], offsets[1])


def read_tensors(
    fd: int, header: SafetensorsHeader, path: str, *, expected_sha256: str | None = None
) -> dict[str, torch.Tensor]:
    """Read every tensor of a validated file into new CPU tensors.

    With ``expected_sha256`` the whole file is hashed while reading (header and data are read
    in file order, so the digest covers every byte) and a mismatch raises CheckpointError.
    """
    hasher = hashlib.sha256(header.header_bytes) if expected_sha256 is not None else None
    tensors: dict[str, torch.Tensor] = {}
    for entry in header.entries:
        tensor = torch.empty(entry.shape, dtype=CODE_TO_TORCH[entry.code])
        if entry.end > entry.begin:
            buffer = tensor.reshape(-1).view(torch.uint8).numpy()
            _pread_into(fd, buffer.data, header.data_start + entry.begin, path)
            if hasher is not None:
                hasher.update(buffer.data)
        tensors[entry.name] = tensor
    if hasher is not None and hasher.hexdigest() != expected_sha256:
        raise CheckpointError(path, "SHA-256 checksum mismatch (file is corrupted)")
    return tensors


def write_tensors(path: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> str:
    """Write ``tensors`` as a safetensors file, fsync it and return its SHA-256 hex digest."""
    _require_little_endian()
    safetensors.torch.save_file(tensors, path, metadata=metadata)
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            hasher.update(chunk)
        os.fsync(handle.fileno())
    return hasher.hexdigest()


def _pread_all(fd: int, size: int, offset: int, path: str) -> bytes:
    buffer = bytearray(size)
    _pread_into(fd, memoryview(buffer), offset, path)
    return bytes(buffer)


def _pread_into(fd: int, view: memoryview, offset: int, path: str) -> None:
    view = view.cast("B")
    done = 0
    while done < len(view):
        count = os.preadv(fd, [view[done : done + _READ_CHUNK]], offset + done)
        if count <= 0:
            raise CheckpointError(path, "file ended early (truncated while reading)")
        done += count


def _require_little_endian() -> None:
    if sys.byteorder != "little":
        raise CheckpointError(None, "checkpoints are only supported on little-endian hosts")


def json_header_metadata(part: str) -> dict[str, str]:
    """Return the informational ``__metadata__`` stored in each part's safetensors header."""
    return {"format": "agile-checkpoint-part", "part": part}
