"""Low-level filesystem helpers: fsync of directories, atomic exchange, safe removal."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

MANIFEST_NAME = "manifest.json"

#: set to False to force the portable rename-with-backup protocol (used by tests).
USE_RENAME_EXCHANGE = sys.platform.startswith("linux")

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_SIDE_NAME = re.compile(r"^\.(?P<kind>tmp|old)-(?P<name>.+)-(?P<token>[0-9a-f]{12})$")


def side_name(kind: str, name: str) -> str:
    """Return a fresh hidden sibling name ``.<kind>-<name>-<random>`` (kind: tmp or old)."""
    return f".{kind}-{name}-{secrets.token_hex(6)}"


def parse_side_name(entry: str) -> tuple[str, str] | None:
    """Split a sibling name made by :func:`side_name` into ``(kind, name)``; else ``None``."""
    match = _SIDE_NAME.match(entry)
    return None if match is None else (match["kind"], match["name"])


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (new/renamed/removed names) to stable storage."""
    if sys.platform == "win32":  # directories cannot be opened for fsync there
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """Create ``path`` and missing parents, fsyncing each parent whose entries changed."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir()
        fsync_dir(directory.parent)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a directory")


def exchange(first: Path, second: Path) -> bool:
    """Atomically swap two existing paths with ``renameat2(RENAME_EXCHANGE)``.

    Returns False (having changed nothing) where the OS or filesystem lacks the call.
    """
    if not USE_RENAME_EXCHANGE:
        return False
    function = _renameat2()
    if function is None:
        return False
    result = function(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(
        code, f"renameat2 exchange failed: {os.strerror(code)}", str(first), None, str(second)
    )


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return function


def remove_tree(path: Path) -> None:
    """Delete a checkpoint-like directory, removing its manifest first.

    Unlinking the manifest first means a removal cut short by a crash never leaves something
    that looks like a complete checkpoint.
    """
    try:
        (path / MANIFEST_NAME).unlink()
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        path.unlink(missing_ok=True)
        return
    shutil.rmtree(path, ignore_errors=True)
