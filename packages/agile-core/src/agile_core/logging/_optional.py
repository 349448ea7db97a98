"""Lazy imports of optional dependencies with an actionable error message."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, *, package: str, extra: str) -> ModuleType:
    """Import ``module`` or raise an ImportError telling how to install the ``extra``.

    ``package`` is the PyPI distribution that provides the module and ``extra`` the
    agile-core extra that pulls it in (``pip install "agile-core[<extra>]"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this logging backend needs the optional package {package!r}, which is not "
            f'installed; install it with: pip install "agile-core[{extra}]"'
        ) from exc
