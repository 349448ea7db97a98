"""Paths a client names (downloads) and paths a manifest names: both must stay inside one folder."""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any


class UnsafePath(ValueError):
    """A path that is absolute, climbs with `..`, or resolves (through links) outside its folder."""


def resolve_inside(root: Path, relative: str, what: str = "the run directory") -> Path:
    """`root/relative` with every link resolved, refusing absolute paths, `..` parts, NUL bytes and
    anything whose real location is not `root` or below it. `""` and `"."` mean `root` itself."""
    if "\x00" in relative:
        raise UnsafePath("the path contains a NUL byte")
    if relative.startswith(("/", "\\", "~")) or PureWindowsPath(relative).drive:
        raise UnsafePath(f"the path must be relative to {what}")
    parts = PurePosixPath(relative.replace("\\", "/")).parts
    if ".." in parts:
        raise UnsafePath("the path must not contain '..'")
    real_root = Path(os.path.realpath(root))
    target = Path(os.path.realpath(real_root.joinpath(*parts)))
    if target != real_root and real_root not in target.parents:
        raise UnsafePath(f"the path leaves {what}")
    return target


_PATH_KEY = re.compile(r"^(path|features|targets)$|_(path|dir|directory|file|folder)$")


def manifest_path_issues(data: Any, base_dir: Path) -> list[tuple[tuple[str | int, ...], str, str]]:
    """(field path, message, value) for every path-like manifest value that would leave `base_dir`:
    string values under keys such as `path`, `*_path`, `*_dir`, `*_file`, `features`, `targets`
    (any depth) that are absolute, start with `~`, contain `..`, or resolve outside `base_dir`."""
    issues: list[tuple[tuple[str | int, ...], str, str]] = []

    def walk(node: Any, where: tuple[str | int, ...]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and isinstance(value, str) and _PATH_KEY.search(key):
                    try:
                        resolve_inside(base_dir, value, "the job directory")
                    except UnsafePath as exc:
                        issues.append(((*where, key), str(exc), value))
                else:
                    walk(value, (*where, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, (*where, index))

    walk(data, ())
    return issues
