"""The ``manifest.json`` of a checkpoint directory: building it and validating it on load."""

from __future__ import annotations

import importlib.metadata
import platform
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agile_core.checkpoint.errors import CheckpointError

FORMAT_NAME = "agile-checkpoint"
FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = frozenset({1})
PART_SUFFIX = ".safetensors"
MAX_MANIFEST_BYTES = 256 * 1024 * 1024

_PART_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_VERSIONED_PACKAGES = ("torch", "numpy", "safetensors", "agile-core")


@dataclass(frozen=True)
class PartInfo:
    """Where a part lives and what its safetensors file must contain."""

    name: str
    file: str
    size: int
    sha256: str
    skeleton: dict[str, Any]


@dataclass(frozen=True)
class Manifest:
    """A validated manifest."""

    format_version: int
    created_at: str
    created_unix: float
    versions: dict[str, str | None]
    metadata: dict[str, Any]
    step: int | None
    parts: dict[str, PartInfo]


def check_part_name(name: object) -> str:
    """Return ``name`` if it is a valid part name (letters, digits, ``_ . -``), else raise."""
    if not isinstance(name, str) or not _PART_NAME.match(name):
        raise ValueError(
            f"invalid checkpoint part name {name!r}: use 1-128 letters, digits, '_', '.' or '-', "
            "not starting with '.' or '-'"
        )
    return name


def part_file_name(name: str) -> str:
    """Return the file name holding part ``name``."""
    return check_part_name(name) + PART_SUFFIX


def package_versions() -> dict[str, str | None]:
    """Return the installed versions of python, torch, numpy, safetensors and agile-core."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in _VERSIONED_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def build_manifest(
    parts: list[PartInfo], metadata: dict[str, Any], step: int | None
) -> dict[str, Any]:
    """Assemble the JSON document written as ``manifest.json``."""
    now = time.time()
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created_at": datetime.fromtimestamp(now, tz=UTC).isoformat(),
        "created_unix": now,
        "versions": package_versions(),
        "step": step,
        "metadata": metadata,
        "parts": {
            part.name: {
                "file": part.file,
                "bytes": part.size,
                "sha256": part.sha256,
                "skeleton": part.skeleton,
            }
            for part in parts
        },
    }


def parse_manifest(document: Any, path: str) -> Manifest:
    """Validate a parsed manifest document; ``path`` names the file in errors."""
    if not isinstance(document, dict):
        raise CheckpointError(path, "manifest is not a JSON object")
    if document.get("format") != FORMAT_NAME:
        raise CheckpointError(
            path,
            f"not an agile checkpoint: format is {document.get('format')!r}, expected {FORMAT_NAME!r}",
        )
    version = document.get("format_version")
    if type(version) is not int:
        raise CheckpointError(path, f"format_version must be an integer, got {version!r}")
    if version not in SUPPORTED_FORMAT_VERSIONS:
        newer = version > max(SUPPORTED_FORMAT_VERSIONS)
        raise CheckpointError(
            path,
            f"unsupported format_version {version} (this agile-core reads "
            f"{sorted(SUPPORTED_FORMAT_VERSIONS)})"
            + ("; it was written by a newer agile-core, upgrade to load it" if newer else ""),
        )
    created_at = _typed(document, "created_at", str, path)
    created_unix = document.get("created_unix")
    if not isinstance(created_unix, (int, float)) or isinstance(created_unix, bool):
        raise CheckpointError(path, "created_unix must be a number")
    versions = _typed(document, "versions", dict, path)
    metadata = _typed(document, "metadata", dict, path)
    step = document.get("step")
    if step is not None and (type(step) is not int or step < 0):
        raise CheckpointError(path, f"step must be a non-negative integer or null, got {step!r}")
    parts = {
        name: _parse_part(name, entry, path)
        for name, entry in _typed(document, "parts", dict, path).items()
    }
    return Manifest(version, created_at, float(created_unix), versions, metadata, step, parts)


def _parse_part(name: str, entry: Any, path: str) -> PartInfo:
    try:
        expected_file = part_file_name(name)
    except ValueError as exc:
        raise CheckpointError(path, str(exc)) from exc
    if not isinstance(entry, dict):
        raise CheckpointError(path, f"part {name!r} entry is not an object")
    if entry.get("file") != expected_file:
        raise CheckpointError(
            path, f"part {name!r} must be stored in {expected_file!r}, not {entry.get('file')!r}"
        )
    size = entry.get("bytes")
    if type(size) is not int or size < 0:
        raise CheckpointError(path, f"part {name!r} has an invalid byte size {size!r}")
    sha256 = entry.get("sha256")
    if not isinstance(sha256, str) or not _SHA256.match(sha256):
        raise CheckpointError(path, f"part {name!r} has an invalid sha256 {sha256!r}")
    skeleton = entry.get("skeleton")
    if not isinstance(skeleton, dict):
        raise CheckpointError(path, f"part {name!r} has no skeleton")
    return PartInfo(name, expected_file, size, sha256, skeleton)


def _typed(document: dict[str, Any], key: str, kind: type, path: str) -> Any:
    value = document.get(key)
    if not isinstance(value, kind):
        raise CheckpointError(path, f"manifest field {key!r} must be a {kind.__name__}")
    return value
