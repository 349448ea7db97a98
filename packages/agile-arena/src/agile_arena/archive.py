"""Putting downloads in place: all or nothing, and never outside the target folder.

Archives are checked member by member before anything is written (no absolute names, no `..`, no
links, devices or FIFOs), extracted into a temporary folder beside the destination, then renamed
onto it, so an interrupted or refused download leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from agile_arena.errors import UnsafeArchiveError


def check_member(member: tarfile.TarInfo) -> PurePosixPath:
    """The member's relative path; UnsafeArchiveError for anything that could escape or is not a
    plain file or folder."""
    name = member.name
    path = PurePosixPath(name)
    if not name or "\x00" in name:
        raise UnsafeArchiveError("refusing an archive member with an empty or invalid name")
    if path.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(f"refusing archive member {name!r}: absolute path")
    if ".." in path.parts or "\\" in name:
        raise UnsafeArchiveError(f"refusing archive member {name!r}: it leaves the target folder")
    if member.issym() or member.islnk():
        raise UnsafeArchiveError(f"refusing archive member {name!r}: links are not allowed")
    if not (member.isfile() or member.isdir()):
        raise UnsafeArchiveError(f"refusing archive member {name!r}: only files and folders are allowed")
    if member.isfile() and not path.parts:
        raise UnsafeArchiveError(f"refusing archive member {name!r}: a file needs a name")
    return path


def extract_tar(archive: Path, target: Path) -> None:
    """Extract a checked uncompressed/compressed tar into the existing empty folder `target`."""
    with tarfile.open(archive, mode="r:*") as tar:
        members = tar.getmembers()
        checked = [(member, check_member(member)) for member in members]  # all checked before writing
        for member, relative in checked:
            destination = target.joinpath(*relative.parts)
            if member.isdir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is None:
                raise UnsafeArchiveError(f"refusing archive member {member.name!r}: no file data")
            with source, open(destination, "wb") as out:
                shutil.copyfileobj(source, out)
            os.chmod(destination, 0o644 | (0o111 if member.mode & 0o100 else 0))


def temporary_beside(destination: Path, suffix: str = ".part") -> Path:
    """A fresh temporary file path in the destination's folder (same file system, so renames are atomic)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=suffix, dir=destination.parent)
    os.close(descriptor)
    return Path(name)


def write_chunks_atomically(chunks: Iterable[bytes], destination: Path, *, overwrite: bool = False) -> Path:
    """Write streamed bytes to `destination` through a temporary file renamed at the end."""
    if destination.exists() and not overwrite:
        raise FileExistsError(f"{destination} exists (pass overwrite to replace it)")
    temporary = temporary_beside(destination)
    try:
        with open(temporary, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if destination.is_dir():
            _replace_dir_with(destination, temporary)
        else:
            os.replace(temporary, destination)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    return destination


def install_tar_atomically(archive: Path, destination: Path, *, overwrite: bool = False) -> Path:
    """Extract `archive` into a temporary folder beside `destination`, then rename it into place."""
    if destination.exists() and not overwrite:
        raise FileExistsError(f"{destination} exists (pass overwrite to replace it)")
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", suffix=".part", dir=destination.parent))
    try:
        extract_tar(archive, staging)
        os.chmod(staging, 0o755)
        if destination.exists():
            _replace_dir_with(destination, staging)
        else:
            os.replace(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return destination


def _replace_dir_with(destination: Path, new: Path) -> None:
    """Swap `new` in for an existing `destination` (moved aside first, removed after)."""
    aside = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", suffix=".old", dir=destination.parent))
    aside.rmdir()
    os.replace(destination, aside)
    try:
        os.replace(new, destination)
    except BaseException:
        os.replace(aside, destination)
        raise
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)
