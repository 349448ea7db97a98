"""Finding what an environment section names: a module attribute, or a class or factory in a
Python file. Errors name the manifest field (``environment.entrypoint``, ``environment.path``,
``environment.wrappers``...)."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["EnvironmentBuildError", "attribute", "creator_in_file", "import_module", "import_target",
           "load_python_file"]


class EnvironmentBuildError(ValueError):
    """An environment section that names something that cannot be built."""


def import_module(module_name: str, field: str) -> Any:
    """Import `module_name`; an error names ``environment.<field>``, the install command when an
    optional package is missing (PettingZoo butterfly's pymunk...), and the modules of the same
    package with a close name when `module_name` itself does not exist (``cooperative_pong_v5``)."""
    from agile_core.environments.extras import missing_extra_message

    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        message = missing_extra_message(f"environment.{field}: '{module_name}'", exc)
        if message is None:
            message = f"environment.{field}: cannot import module '{module_name}' ({exc}){_close_modules(module_name, exc)}"
        raise EnvironmentBuildError(message) from None


def _close_modules(module_name: str, exc: ImportError) -> str:
    """``; did you mean 'pkg.name_v6'?`` when `module_name` is missing from an importable package."""
    package, _, leaf = module_name.rpartition(".")
    if not package or exc.name != module_name:
        return ""
    try:
        parent = importlib.import_module(package)
    except ImportError:
        return ""
    names = [info.name for info in pkgutil.iter_modules(getattr(parent, "__path__", [])) if not info.ispkg]
    close = difflib.get_close_matches(leaf, names, n=3, cutoff=0.75)
    return "; did you mean " + " or ".join(f"'{package}.{name}'" for name in close) + "?" if close else ""


def attribute(target: Any, dotted: str, field: str, where: str) -> Any:
    """The (dotted) attribute `dotted` of `target`; an error names the field and `where` it was looked for."""
    for part in dotted.split("."):
        if not hasattr(target, part):
            raise EnvironmentBuildError(f"environment.{field}: {where} has no attribute '{dotted}'")
        target = getattr(target, part)
    return target


def import_target(target: str, field: str) -> Any:
    """What `package.module:attr` (or `package.module.attr`) names."""
    if ":" in target:
        module_name, _, name = target.partition(":")
    else:
        module_name, _, name = target.rpartition(".")
    return attribute(import_module(module_name, field), name, field, f"module '{module_name}'")


def load_python_file(path: Path) -> Any:
    """Import a Python file as a module, once per process, under a name fixed by its path."""
    name = f"agile_user_env_{abs(hash(str(path.resolve())))}"
    if name in sys.modules:
        return sys.modules[name]
    if not path.is_file():
        raise EnvironmentBuildError(f"environment.path: no such file '{path}'")
    file_spec = importlib.util.spec_from_file_location(name, path)
    if file_spec is None or file_spec.loader is None:
        raise EnvironmentBuildError(f"environment.path: cannot import '{path}'")
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[name] = module
    try:
        file_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise EnvironmentBuildError(f"environment.path: importing '{path}' failed: {type(exc).__name__}: {exc}") from exc
    return module


def creator_in_file(path: Path, name: str | None, base: type, *, functions: Sequence[str] = ()) -> Any:
    """The environment class or factory a file defines: its attribute `name` when given, else the
    first of `functions` it defines, else its only subclass of `base`."""
    module = load_python_file(path)
    if name is not None:
        return attribute(module, name, "entrypoint", f"'{path}'")
    for function in functions:
        if callable(getattr(module, function, None)):
            return getattr(module, function)
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, base) and obj.__module__ == module.__name__]
    if len(found) != 1:
        names = ", ".join(cls.__name__ for cls in found) or "none"
        kinds = " or ".join([*(f"{function}()" for function in functions),
                             f"exactly one {base.__module__.split('.')[0]}.{base.__name__} subclass"])
        raise EnvironmentBuildError(f"environment.path: '{path}' must define {kinds} (found {names}); "
                                    "name the one to use with `entrypoint`")
    return found[0]
