"""Loading checkpoints: validation first, then tensor reads; never executes stored code.

Opening a checkpoint opens the directory once and every file relative to that directory
handle (no symlinks followed inside it, regular files only), validates the manifest and
every safetensors header against the skeletons, and keeps the part files open. A writer
that atomically replaces the directory meanwhile cannot make us mix two versions: we keep
reading the version we opened, and if it vanished before all files were open we retry.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from agile_core.checkpoint.errors import CheckpointError
from agile_core.checkpoint.fsutil import MANIFEST_NAME, parse_side_name
from agile_core.checkpoint.jsonio import strict_loads
from agile_core.checkpoint.manifest import MAX_MANIFEST_BYTES, Manifest, PartInfo, parse_manifest
from agile_core.checkpoint.safetensors_io import SafetensorsHeader, read_header, read_tensors
from agile_core.checkpoint.state import expected_entry, iter_tensor_refs, unflatten_state

_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_ATTEMPTS = 3


class _Replaced(Exception):
    """The directory was swapped out while we were opening it."""


class Checkpoint:
    """An opened, validated checkpoint; parts are loaded eagerly or on first access.

    Use as a context manager (or call :meth:`close`) when opened lazily, to release the
    file handles kept for not-yet-loaded parts.
    """

    def __init__(
        self,
        path: Path,
        manifest: Manifest,
        files: dict[str, tuple[int, SafetensorsHeader]],
        *,
        map_location: str | torch.device,
        verify: bool,
    ) -> None:
        self.path = path
        self.manifest = manifest
        self._files = files
        self._map_location = torch.device(map_location)
        self._verify = verify
        self._loaded: dict[str, Any] = {}

    @property
    def metadata(self) -> dict[str, Any]:
        """The caller-provided metadata dict stored with the checkpoint."""
        return self.manifest.metadata

    @property
    def step(self) -> int | None:
        """The step recorded at save time, if any."""
        return self.manifest.step

    @property
    def part_names(self) -> tuple[str, ...]:
        """Names of the stored parts, in save order."""
        return tuple(self.manifest.parts)

    @property
    def parts(self) -> dict[str, Any]:
        """Every part, loading the ones not loaded yet."""
        return {name: self.part(name) for name in self.manifest.parts}

    def part(self, name: str) -> Any:
        """Return the rebuilt object of part ``name`` (loaded once, then cached)."""
        if name in self._loaded:
            return self._loaded[name]
        if name not in self.manifest.parts:
            raise KeyError(
                f"checkpoint {self.path} has no part {name!r}; parts: {list(self.manifest.parts)}"
            )
        if name not in self._files:
            raise CheckpointError(self.path, "checkpoint was closed before this part was loaded")
        info = self.manifest.parts[name]
        fd, header = self._files[name]
        file_path = str(self.path / info.file)
        tensors = read_tensors(
            fd, header, file_path, expected_sha256=info.sha256 if self._verify else None
        )
        try:
            value = unflatten_state(tensors, info.skeleton, device=self._map_location)
        except CheckpointError as exc:
            raise CheckpointError(file_path, exc.problem) from exc
        self._loaded[name] = value
        os.close(self._files.pop(name)[0])
        return value

    def load_all(self) -> Checkpoint:
        """Load every part now and release the file handles; returns ``self``."""
        for name in self.manifest.parts:
            self.part(name)
        self.close()
        return self

    def close(self) -> None:
        """Release file handles of parts that were not loaded."""
        while self._files:
            _, (fd, _) = self._files.popitem()
            os.close(fd)

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if hasattr(self, "_files"):
            self.close()

    def __repr__(self) -> str:
        return (
            f"Checkpoint({str(self.path)!r}, step={self.step}, parts={list(self.manifest.parts)})"
        )


def read_checkpoint(
    path: str | os.PathLike[str],
    *,
    map_location: str | torch.device = "cpu",
    lazy: bool = False,
    verify: bool = True,
) -> Checkpoint:
    """Open and validate the checkpoint at ``path``; load all parts unless ``lazy``.

    ``map_location`` is where torch tensors are placed (numpy arrays stay numpy).
    ``verify`` checks each part file's SHA-256 while reading it. If ``path`` is missing but
    an interrupted overwrite left a complete backup beside it, the backup is read (the
    directory is not modified). Every problem raises :class:`CheckpointError`.
    """
    checkpoint = _open(path, resolve=True, map_location=map_location, verify=verify)
    return checkpoint if lazy else checkpoint.load_all()


def inspect_checkpoint(path: str | os.PathLike[str]) -> Manifest:
    """Validate a checkpoint's manifest and file headers without reading tensor data."""
    with _open(path, resolve=True, map_location="cpu", verify=False) as checkpoint:
        return checkpoint.manifest


def is_complete_checkpoint(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` (or its interrupted-overwrite backup) passes :func:`inspect_checkpoint`."""
    try:
        inspect_checkpoint(path)
    except CheckpointError:
        return False
    return True


def resolve_checkpoint_dir(path: str | os.PathLike[str]) -> Path:
    """Return the directory to read for ``path``: itself, or a complete backup when missing."""
    target = Path(path)
    if target.is_dir():
        return target
    if target.exists() or target.is_symlink():
        raise CheckpointError(target, "is not a directory (a checkpoint is a directory)")
    backup = find_backup(target)
    if backup is None:
        raise CheckpointError(target, "checkpoint directory does not exist")
    return backup


def find_backup(target: Path) -> Path | None:
    """Newest complete ``.old-<name>-*`` sibling left by an interrupted overwrite, if any."""
    try:
        entries = os.listdir(target.parent)
    except (FileNotFoundError, NotADirectoryError):
        return None
    best: tuple[float, str] | None = None
    for entry in entries:
        if parse_side_name(entry) != ("old", target.name):
            continue
        try:
            with _open(
                target.parent / entry, resolve=False, map_location="cpu", verify=False
            ) as candidate:
                key = (candidate.manifest.created_unix, entry)
        except CheckpointError:
            continue
        if best is None or key > best:
            best = key
    return None if best is None else target.parent / best[1]


def _open(
    path: str | os.PathLike[str], *, resolve: bool, map_location: str | torch.device, verify: bool
) -> Checkpoint:
    """Open ``path``, retrying if a writer swaps the directory while we open its files."""
    problem = ""
    for _ in range(_ATTEMPTS):
        directory = resolve_checkpoint_dir(path) if resolve else Path(path)
        try:
            return _open_once(directory, map_location=map_location, verify=verify)
        except _Replaced as replaced:
            problem = str(replaced)
    raise CheckpointError(path, f"checkpoint kept changing while being opened ({problem})")


def _open_once(directory: Path, *, map_location: str | torch.device, verify: bool) -> Checkpoint:
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _Replaced(f"{directory} vanished") from None
    except NotADirectoryError:
        raise CheckpointError(
            directory, "is not a directory (a checkpoint is a directory)"
        ) from None
    files: dict[str, tuple[int, SafetensorsHeader]] = {}
    try:
        manifest = _read_manifest(dir_fd, directory)
        for info in manifest.parts.values():
            fd = _open_member(dir_fd, directory, info.file)
            files[info.name] = (fd, _check_part(fd, directory / info.file, info))
    except CheckpointError:
        for fd, _ in files.values():
            os.close(fd)
        if _was_replaced(directory, dir_fd):
            raise _Replaced(f"{directory} was replaced") from None
        raise
    finally:
        os.close(dir_fd)
    return Checkpoint(directory, manifest, files, map_location=map_location, verify=verify)


def _was_replaced(directory: Path, dir_fd: int) -> bool:
    try:
        current = os.stat(directory)
    except OSError:
        return True
    opened = os.fstat(dir_fd)
    return (current.st_dev, current.st_ino) != (opened.st_dev, opened.st_ino)


def _open_member(dir_fd: int, directory: Path, name: str) -> int:
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if name == MANIFEST_NAME:
            raise CheckpointError(directory, f"not a checkpoint: no {MANIFEST_NAME}") from None
        raise CheckpointError(directory / name, "file listed in the manifest is missing") from None
    except OSError as exc:
        raise CheckpointError(
            directory / name, f"cannot open ({exc.strerror}; symlinks are refused)"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CheckpointError(directory / name, "is not a regular file")
    return fd


def _read_manifest(dir_fd: int, directory: Path) -> Manifest:
    path = directory / MANIFEST_NAME
    fd = _open_member(dir_fd, directory, MANIFEST_NAME)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_MANIFEST_BYTES:
            raise CheckpointError(path, f"manifest is implausibly large ({size} bytes)")
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 24):
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    try:
        document = strict_loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(path, f"manifest is not valid UTF-8 JSON ({exc})") from None
    except RecursionError:
        raise CheckpointError(path, "manifest JSON is nested too deeply") from None
    return parse_manifest(document, str(path))


def _check_part(fd: int, path: Path, info: PartInfo) -> SafetensorsHeader:
    header = read_header(fd, str(path))
    if header.file_size != info.size:
        raise CheckpointError(path, f"file is {header.file_size} bytes, manifest says {info.size}")
    expected: dict[str, tuple[str, tuple[int, ...]]] = {}
    try:
        for node in iter_tensor_refs(info.skeleton):
            key, code, shape = expected_entry(node)
            if key in expected:
                raise CheckpointError(path, f"skeleton references tensor {key!r} twice")
            expected[key] = (code, tuple(shape))
    except CheckpointError as exc:
        raise CheckpointError(path, exc.problem) from None
    actual = header.by_name()
    if expected.keys() != actual.keys():
        missing = sorted(expected.keys() - actual.keys())[:5]
        extra = sorted(actual.keys() - expected.keys())[:5]
        raise CheckpointError(
            path, f"tensor names do not match the manifest (missing {missing}, unexpected {extra})"
        )
    for key, (code, dims) in expected.items():
        entry = actual[key]
        if (entry.code, entry.shape) != (code, dims):
            raise CheckpointError(
                path,
                f"tensor {key!r} is {entry.code}{list(entry.shape)}, manifest expects {code}{list(dims)}",
            )
    return header
