"""Run-directory files for the API: the checkpoint list and downloads (a file, or a directory as an
uncompressed tar built in a spooled temporary file so a half-written tar is never sent)."""

from __future__ import annotations

import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

CHUNK = 1024 * 1024
SPOOL_BYTES = 16 * 1024 * 1024


def folder_bytes(path: Path) -> int:
    """Total size of the regular files under `path` (links not followed)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            info = os.lstat(os.path.join(folder, name))
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def remove_tree(path: Path) -> None:
    """Delete a folder a job wrote: links are removed, never followed, and folders the job made
    read-only are made writable first. A folder that is already gone is fine."""
    import shutil

    if not os.path.lexists(path):
        return
    folders = [str(path)]
    while folders:  # no recursion: a job may nest folders deeper than Python's stack
        folder = folders.pop()
        try:
            os.chmod(folder, 0o700)
            with os.scandir(folder) as entries:
                folders.extend(entry.path for entry in entries if entry.is_dir(follow_symlinks=False))
        except OSError:
            continue
    shutil.rmtree(path)


def _modified(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")


def list_checkpoints(run_dir: Path) -> list[dict[str, Any]]:
    """Complete run checkpoints (`checkpoints/<name>`, oldest first) and the elite, if saved."""
    found = []
    root = run_dir / "checkpoints"
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            if entry.name.startswith(".") or entry.is_symlink() or not (entry / "manifest.json").is_file():
                continue
            found.append({"path": f"checkpoints/{entry.name}", "kind": "run", "bytes": folder_bytes(entry),
                          "modified": _modified(entry)})
    elite = run_dir / "elite"
    if elite.is_dir() and not elite.is_symlink() and (elite / "manifest.json").is_file():
        found.append({"path": "elite", "kind": "elite", "bytes": folder_bytes(elite), "modified": _modified(elite)})
    return found


def tar_directory(folder: Path) -> IO[bytes]:
    """An uncompressed tar of `folder` (member names relative to it; regular files and folders only,
    links skipped), rewound, in a temporary file."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (returned open)
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for parent, dirs, names in os.walk(folder):
            dirs.sort()
            base = Path(parent)
            for name in [*sorted(dirs), *sorted(names)]:
                path = base / name
                info = os.lstat(path)
                if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                    continue
                member = tar.gettarinfo(str(path), arcname=path.relative_to(folder).as_posix())
                member.uname = member.gname = ""
                member.uid = member.gid = 0
                if member.isfile():
                    with open(path, "rb") as handle:
                        tar.addfile(member, handle)
                else:
                    tar.addfile(member)
    spool.seek(0)
    return spool


def chunks(handle: IO[bytes]) -> Iterator[bytes]:
    """Read `handle` to its end in 1 MiB pieces, then close it."""
    try:
        while block := handle.read(CHUNK):
            yield block
    finally:
        handle.close()


def size_of(handle: IO[bytes]) -> int:
    """Bytes from the current position to the end (the position is kept)."""
    here = handle.tell()
    handle.seek(0, os.SEEK_END)
    end = handle.tell()
    handle.seek(here)
    return end - here
