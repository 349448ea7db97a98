"""Writing checkpoint directories atomically, and recovering from interrupted writes.

Protocol for ``write_checkpoint(<parent>/<name>)`` (one writer per destination at a time;
:class:`CheckpointManager` enforces that with a lock file):

1. *Recover*: if ``<name>`` is missing but a complete ``.old-<name>-*`` backup exists (a
   crash inside step 4b), rename it back and fsync; then delete every other
   ``.tmp-<name>-*`` / ``.old-<name>-*`` leftover.
2. *Stage*: write every part file, then ``manifest.json``, into a fresh sibling
   ``.tmp-<name>-<random>``; fsync each file, then the staging directory.
3. *Publish, new destination*: ``rename(staging, <name>)``; fsync the parent.
4. *Publish, existing destination*:
   a. Linux: ``renameat2(RENAME_EXCHANGE)`` swaps both names atomically; fsync the parent;
      delete the staging name (which now holds the old checkpoint).
   b. Elsewhere, or if the filesystem refuses the exchange: ``rename(<name>, .old-…)``;
      fsync the parent; ``rename(staging, <name>)``; fsync the parent; delete the backup.

Deleting a directory unlinks ``manifest.json`` first, so a half-deleted directory is never
mistaken for a complete one. Readers never modify anything: they ignore ``.tmp-*`` names
and read a complete ``.old-<name>-*`` only while ``<name>`` itself is missing.

What a crash (process kill, or power loss given a filesystem that honours fsync and
journals renames, e.g. ext4/xfs) leaves at each point:

* during 1-2: ``<name>`` holds the previous checkpoint (or nothing, if this is the first
  write), untouched. Staging leftovers are ignored and removed by the next write.
* during 3: the rename is atomic; ``<name>`` is absent or the new, fully synced checkpoint.
* during 4a: the exchange is atomic; ``<name>`` is the old or the new checkpoint. After it,
  the old one lingers under the staging name until deleted (or until the next write).
* during 4b, between the two renames: ``<name>`` is missing; the old checkpoint is complete
  under ``.old-<name>-*`` and readers use it; the next write renames it back first. Before
  the first rename or after the second, as in 4a.
* power loss before a parent fsync may undo the latest rename after reboot, which only
  moves us back to the previous of the states above. Files are synced before any rename
  publishes them, so a published name never points at unsynced data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agile_core.checkpoint.errors import CheckpointError
from agile_core.checkpoint.fsutil import (
    MANIFEST_NAME,
    exchange,
    fsync_dir,
    make_dirs,
    parse_side_name,
    remove_tree,
    side_name,
)
from agile_core.checkpoint.jsonio import require_exact_json, write_json_durably
from agile_core.checkpoint.manifest import PART_SUFFIX, PartInfo, build_manifest, part_file_name
from agile_core.checkpoint.reader import find_backup
from agile_core.checkpoint.safetensors_io import json_header_metadata, write_tensors
from agile_core.checkpoint.state import flatten_state


def write_checkpoint(
    path: str | os.PathLike[str],
    parts: Mapping[str, Any],
    *,
    metadata: Mapping[str, Any] | None = None,
    step: int | None = None,
    replace: bool = True,
) -> Path:
    """Atomically write a checkpoint directory at ``path`` and return its path.

    Each entry of ``parts`` (e.g. ``"agent_0"``, ``"buffer"``) is any state accepted by
    :func:`flatten_state`, stored in ``<part>.safetensors`` with its skeleton in the manifest.
    ``metadata`` must be exact JSON (str keys, lists, plain scalars). With ``replace`` an
    existing checkpoint at ``path`` is replaced atomically; otherwise FileExistsError.
    """
    destination = Path(path).absolute()
    prepared = _prepare_parts(parts)
    meta = require_exact_json(dict(metadata or {}), "checkpoint metadata")
    if step is not None and (type(step) is not int or step < 0):
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    make_dirs(destination.parent)
    recover(destination)
    _check_destination(destination, replace)
    staging = destination.parent / side_name("tmp", destination.name)
    staging.mkdir()
    try:
        infos = [
            _write_part(staging, name, tensors, skeleton)
            for name, (tensors, skeleton) in prepared.items()
        ]
        write_json_durably(str(staging / MANIFEST_NAME), build_manifest(infos, meta, step))
        fsync_dir(staging)
        _publish(staging, destination)
    except BaseException:
        remove_tree(staging)
        raise
    return destination


def recover(path: str | os.PathLike[str]) -> bool:
    """Repair the aftermath of an interrupted write to ``path``; True if a backup was restored.

    Restores the newest complete backup when ``path`` is missing, then deletes leftover
    staging and backup directories of ``path``. Only writers should call this.
    """
    destination = Path(path).absolute()
    restored = False
    if not os.path.lexists(destination):
        backup = find_backup(destination)
        if backup is not None:
            os.rename(backup, destination)
            fsync_dir(destination.parent)
            restored = True
    try:
        entries = os.listdir(destination.parent)
    except FileNotFoundError:
        return restored
    for entry in entries:
        side = parse_side_name(entry)
        if side is not None and side[1] == destination.name:
            remove_tree(destination.parent / entry)
    return restored


def discard(path: str | os.PathLike[str]) -> None:
    """Delete a checkpoint directory so that it vanishes atomically from its name."""
    target = Path(path).absolute()
    doomed = target.parent / side_name("tmp", target.name)
    os.rename(target, doomed)
    fsync_dir(target.parent)
    remove_tree(doomed)


def _prepare_parts(parts: Mapping[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    if not isinstance(parts, Mapping):
        raise TypeError(
            f"parts must be a mapping of part name to state, got {type(parts).__qualname__}"
        )
    prepared = {}
    for name, state in parts.items():
        part_file_name(name)  # validates the name
        try:
            prepared[name] = flatten_state(state)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"part {name!r}: {exc}") from exc
    return prepared


def _write_part(
    staging: Path, name: str, tensors: dict[str, Any], skeleton: dict[str, Any]
) -> PartInfo:
    file_name = part_file_name(name)
    file_path = staging / file_name
    digest = write_tensors(str(file_path), tensors, json_header_metadata(name))
    return PartInfo(name, file_name, file_path.stat().st_size, digest, skeleton)


def _check_destination(destination: Path, replace: bool) -> None:
    if not os.path.lexists(destination):
        return
    if not replace:
        raise FileExistsError(f"{destination}: checkpoint already exists (replace=False)")
    if destination.is_symlink() or not destination.is_dir():
        raise CheckpointError(
            destination, "exists and is not a checkpoint directory; refusing to replace it"
        )
    strangers = [
        entry
        for entry in os.listdir(destination)
        if entry != MANIFEST_NAME and not entry.endswith(PART_SUFFIX)
    ]
    if strangers:
        raise CheckpointError(
            destination,
            f"exists and holds files that are not checkpoint files ({sorted(strangers)[:5]}); refusing to replace it",
        )


def _publish(staging: Path, destination: Path) -> None:
    parent = destination.parent
    if not os.path.lexists(destination):
        os.rename(staging, destination)
        fsync_dir(parent)
        return
    if exchange(staging, destination):
        fsync_dir(parent)
        remove_tree(staging)  # now holds the previous checkpoint
        return
    backup = parent / side_name("old", destination.name)
    os.rename(destination, backup)
    fsync_dir(parent)
    os.rename(staging, destination)
    fsync_dir(parent)
    remove_tree(backup)
