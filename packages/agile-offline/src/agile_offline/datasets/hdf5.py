"""HDF5 datasets: load (a file, an open h5py file/group, or a mapping of arrays) and atomic write.

Layout, one row per transition: `observations`, `actions`, `rewards`, `next_observations`,
`terminations` and `truncations` (bool), at the root of the file. Dict observations are a group
with one dataset per key (`observations/<key>`, `next_observations/<key>`). Datasets in the D4RL
convention are accepted too: `terminals` (read as `terminations`) with optional `timeouts` (read
as `truncations`; all False without it). `next_observations` is required: a flat table cannot
tell where one episode's last observation is otherwise.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from agile_core.buffers.memory import BufferTooLargeError, check_fits
from agile_offline.datasets.errors import DatasetError
from agile_offline.datasets.transitions import Observations, TransitionData, from_arrays

__all__ = ["check_output_path", "load_dataset", "read_metadata", "write_hdf5"]

_REQUIRED = ("observations", "actions", "rewards", "next_observations")
_METADATA_ATTR = "agile_metadata"


def _source_name(source: Any) -> str:
    if isinstance(source, h5py.Group):
        filename = Path(source.file.filename).name
        return filename if source.name == "/" else f"{filename}:{source.name}"
    return "dataset mapping"


_MAX_GROUP_DEPTH = 4
"""Nesting a field's groups may have (dict observations use one level; deeper is a link loop)."""


def _read(table: Mapping[str, Any], key: str, source: str, parent: str = "", depth: int = 0) -> Any:
    """Entry `key` of `table` as arrays (groups and mappings become dicts of arrays); DatasetError
    for an external link, a broken or looping link, or a dataset too large for this machine.
    Messages name the entry by its path below the root (`parent/key`)."""
    field = f"{parent}/{key}" if parent else key
    if isinstance(table, h5py.Group):
        link = table.get(key, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            raise DatasetError(f"{source}: `{field}` is an external link to {link.filename}:{link.path}; agile reads "
                               "only data stored in the dataset file itself")
        try:
            value = table[key]
        except (KeyError, RuntimeError, OSError) as exc:
            raise DatasetError(f"{source}: `{field}` cannot be read (a broken or looping link?): {exc}") from None
    else:
        value = table[key]
    if isinstance(value, h5py.Dataset):
        nbytes = int(value.size) * value.dtype.itemsize
        try:
            check_fits(nbytes, rows=int(value.shape[0]) if value.shape else 1, what=f"dataset field `{field}`")
        except BufferTooLargeError as exc:
            raise DatasetError(f"{source}: `{field}` has shape {value.shape}: {exc}") from None
        return value[()]
    if isinstance(value, Mapping):
        if depth >= _MAX_GROUP_DEPTH:
            raise DatasetError(f"{source}: `{field}` nests groups more than {_MAX_GROUP_DEPTH} deep (a link loop?)")
        return {str(name): _read(value, str(name), source, field, depth + 1) for name in value}
    return value


def _fields_present(table: Mapping[str, Any]) -> str:
    return ", ".join(f"`{key}`" for key in sorted(map(str, table))) or "none"


def _flag_fields(source: str, table: Mapping[str, Any]) -> tuple[Any, Any]:
    has_term, has_trunc, has_terminals = ("terminations" in table, "truncations" in table, "terminals" in table)
    if has_terminals and (has_term or has_trunc):
        raise DatasetError(f"{source}: has both `terminals` and `terminations`/`truncations`; keep one convention")
    if has_terminals:
        terminals = _read(table, "terminals", source)
        timeouts = _read(table, "timeouts", source) if "timeouts" in table else np.zeros(np.shape(terminals), bool)
        return terminals, timeouts
    if has_term and has_trunc:
        return _read(table, "terminations", source), _read(table, "truncations", source)
    if has_term or has_trunc:
        present, absent = ("terminations", "truncations") if has_term else ("truncations", "terminations")
        raise DatasetError(f"{source}: has `{present}` but no `{absent}`; store both (or store the terminal "
                           f"flags as `terminals` when no episode was truncated)")
    raise DatasetError(f"{source}: missing field `terminations` and `truncations` (or `terminals`); fields "
                       f"present: {_fields_present(table)}")


def _from_table(source: str, table: Mapping[str, Any]) -> TransitionData:
    for field in _REQUIRED:
        if field not in table:
            hint = (" (HDF5 datasets need the observation after every action; record data with "
                    "`agile dataset record` to get it)" if field == "next_observations" else "")
            raise DatasetError(f"{source}: missing field `{field}`{hint}; fields present: {_fields_present(table)}")
    terminations, truncations = _flag_fields(source, table)
    return from_arrays(source, observations=_read(table, "observations", source),
                       actions=_read(table, "actions", source), rewards=_read(table, "rewards", source),
                       next_observations=_read(table, "next_observations", source),
                       terminations=terminations, truncations=truncations)


def load_dataset(source: str | os.PathLike[str] | h5py.Group | Mapping[str, Any], *,
                 name: str | None = None) -> TransitionData:
    """Transitions from an HDF5 file path, an open ``h5py.File``/``Group`` or a mapping of arrays
    (nested mappings for dict observations). `name` labels error messages (default: the file
    name). Raises `DatasetError` for a missing or unreadable file and for any invalid field."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        label = name or str(source)
        if not path.exists():
            raise DatasetError(f"{label}: no such file")
        if path.is_dir():
            raise DatasetError(f"{label}: is a directory, not an HDF5 file")
        try:
            handle = h5py.File(path, "r")
        except OSError as exc:
            raise DatasetError(f"{label}: cannot be read as an HDF5 file ({exc})") from exc
        with handle:
            return _from_table(label, handle)
    if isinstance(source, Mapping):
        return _from_table(name or _source_name(source), source)
    raise DatasetError(f"{name or 'dataset'}: expected a path, an h5py file/group or a mapping of arrays, "
                       f"got {type(source).__name__}")


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata `write_hdf5` stored in `path` (empty when there is none)."""
    try:
        with h5py.File(path, "r") as handle:
            raw = handle.attrs.get(_METADATA_ATTR)
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read as an HDF5 file ({exc})") from exc
    if raw is None:
        return {}
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    try:
        metadata = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        metadata = None
    if not isinstance(metadata, dict):
        raise DatasetError(f"{path}: its `{_METADATA_ATTR}` attribute is not a JSON object (got {str(raw)[:60]!r}); "
                           "it is written by `agile dataset record` or `write_hdf5`")
    return metadata


def check_output_path(path: str | os.PathLike[str], *, overwrite: bool = True) -> Path:
    """`path` as a `Path` if a dataset can be written there; `DatasetError` otherwise (a directory,
    an existing file without `overwrite`, or a parent folder that cannot be created or written)."""
    target = Path(path)
    if target.is_dir():
        raise DatasetError(f"{path}: is a directory; give a file name such as {target / 'data.h5'}")
    if target.exists() and not overwrite:
        raise DatasetError(f"{path}: already exists (pass --overwrite to replace it)")
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"{path}: cannot create the folder {parent} ({exc.strerror or exc})") from exc
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DatasetError(f"{path}: the folder {parent} is not writable")
    return target


def _write_observations(handle: h5py.File, field: str, value: Observations) -> None:
    if isinstance(value, dict):
        group = handle.create_group(field)
        for key, array in value.items():
            group.create_dataset(key, data=array)
    else:
        handle.create_dataset(field, data=value)


def write_hdf5(data: TransitionData, path: str | os.PathLike[str], *, metadata: Mapping[str, Any] | None = None,
               overwrite: bool = True) -> Path:
    """Write `data` to `path` atomically and return the path.

    The file is written to a temporary file in the same folder and moved into place with
    `os.replace`, so readers see the old file or the complete new one, and an exception leaves
    nothing behind. `metadata` (JSON-serialisable) is stored as the root attribute
    ``agile_metadata``; :func:`read_metadata` reads it back.
    """
    target = check_output_path(path, overwrite=overwrite)
    data = from_arrays(str(path), observations=data.observations, actions=data.actions, rewards=data.rewards,
                       next_observations=data.next_observations, terminations=data.terminations,
                       truncations=data.truncations)
    try:
        meta_text = json.dumps(dict(metadata or {}))
    except TypeError as exc:
        raise DatasetError(f"{path}: metadata is not JSON-serialisable ({exc})") from exc
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        os.chmod(tmp_name, 0o644)  # mkstemp creates 0600; a dataset is meant to be shared
        with h5py.File(tmp_name, "w") as handle:
            _write_observations(handle, "observations", data.observations)
            handle.create_dataset("actions", data=data.actions)
            handle.create_dataset("rewards", data=data.rewards)
            _write_observations(handle, "next_observations", data.next_observations)
            handle.create_dataset("terminations", data=data.terminations)
            handle.create_dataset("truncations", data=data.truncations)
            handle.attrs[_METADATA_ATTR] = meta_text
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return target
