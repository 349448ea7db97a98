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


_PATH_KEY = re.compile(r"^(path|features|targets|dataset|data_files)$|_(path|dir|directory|file|files|folder)$")
_CODE_KEY = re.compile(r"^(entrypoint|wrappers|name)$")


def _file_part(key: str, value: str) -> str | None:
    """The file a value names, when it names one: the whole value under a path-like key; under
    `entrypoint`, `wrappers` and `name`, the module part of `file.py:attr` (or of anything with a
    slash before the colon), since a plain `package.module:attr` names no file."""
    if _PATH_KEY.search(key):
        return value
    if _CODE_KEY.match(key):
        module = value.split(":", 1)[0]
        if module.endswith(".py") or "/" in module or "\\" in module or module.startswith("~"):
            return module
    return None


def manifest_path_issues(data: Any, base_dir: Path) -> list[tuple[tuple[str | int, ...], str, str]]:
    """(field path, message, value) for every manifest value naming a file that would leave
    `base_dir`: strings (or lists of strings) under keys such as `path`, `dataset`, `*_path`,
    `*_dir`, `*_file`, `features`, `targets`, and `file.py:attr` references under `entrypoint`,
    `wrappers` or `name` (any depth), that are absolute, start with `~`, contain `..`, or resolve
    outside `base_dir`. Nothing is looked up, so the answer says nothing about the host's files."""
    issues: list[tuple[tuple[str | int, ...], str, str]] = []

    def check(key: str, value: str, where: tuple[str | int, ...]) -> None:
        file = _file_part(key, value)
        if file is None:
            return
        try:
            resolve_inside(base_dir, file, "the job directory")
        except UnsafePath as exc:
            issues.append((where, str(exc), value))

    def walk(node: Any, where: tuple[str | int, ...], key: str = "") -> None:
        if isinstance(node, dict):
            for child_key, value in node.items():
                walk(value, (*where, child_key), child_key if isinstance(child_key, str) else "")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, (*where, index), key)
        elif isinstance(node, str) and key:
            check(key, node, where)

    walk(data, ())
    return issues
