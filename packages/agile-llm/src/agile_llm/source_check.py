"""Does a Python file or module define a name? Answered by reading its source, never running it,
so `agile validate` stays fast and side-effect free.

Only a certain "no" counts: a file or module that cannot be found or parsed, or whose top level
could bind names in ways the source does not show (``from x import *``, a module ``__getattr__``,
``globals()``, ``exec``, ``setattr``), gives "not known to be missing".
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

__all__ = ["missing_attribute", "source_file"]

_DYNAMIC = ("globals(", "exec(", "setattr(", "__dict__")
"""Source text that may bind module names the syntax tree does not show."""


def source_file(name_or_file: str, base_dir: str | Path | None = None) -> Path | None:
    """The source file of a ``.py`` path (relative to `base_dir`) or of an importable module
    name, found without importing the module or its packages; None when there is none."""
    if name_or_file.endswith(".py"):
        path = Path(name_or_file).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        return path if path.is_file() else None
    return _module_file(name_or_file)


def _module_file(name: str) -> Path | None:
    """The ``.py`` file of module `name`: the top-level package located by the import system's
    finders (which import nothing), then each submodule looked up in its package's folders."""
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    origin = Path(spec.origin) if spec.origin and spec.has_location else None
    folders = [Path(p) for p in spec.submodule_search_locations or []]
    for part in parts[1:]:
        origin = None
        for folder in folders:
            if (folder / part / "__init__.py").is_file():
                origin, folders = folder / part / "__init__.py", [folder / part]
                break
            if (folder / f"{part}.py").is_file():
                origin, folders = folder / f"{part}.py", []
                break
        if origin is None:
            return None
    return origin if origin is not None and origin.suffix == ".py" and origin.is_file() else None


def _bound_names(body: list[ast.stmt]) -> set[str] | None:
    """Names the statements of a module's top level bind, also inside if/try/with/for blocks
    (any assignment target counts); None when a star import or a module ``__getattr__`` makes
    that unknowable."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return None
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        for block in _blocks(node):
            found = _bound_names(block)
            if found is None:
                return None
            names |= found
    return names


def _blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists nested in a compound statement (if, for, while, with, try)."""
    blocks = [value for name in ("body", "orelse", "finalbody")
              if isinstance(value := getattr(node, name, None), list)]
    return blocks + [handler.body for handler in getattr(node, "handlers", [])]


def missing_attribute(name_or_file: str, attribute: str, base_dir: str | Path | None = None) -> bool:
    """True only when the source of `name_or_file` (a ``.py`` file or a module name) is readable
    and certainly binds no top-level `attribute`."""
    path = source_file(name_or_file, base_dir)
    if path is None:
        return False
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    if any(marker in text for marker in _DYNAMIC):
        return False
    names = _bound_names(tree.body)
    return names is not None and attribute not in names
