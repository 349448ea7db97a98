"""Keep ``torch._dynamo`` unimported in runs that never compile.

torch wraps a few optimizer methods (``Optimizer.add_param_group``, ``state_dict``,
``load_state_dict``, ``zero_grad``) in ``torch._disable_dynamo``, which imports ``torch._dynamo``
on their first call: 1.3-1.5 s of a short run's start-up, and some 170 MB of memory, spent to
switch off a compiler agile never starts. (agile's learning steps use its own stacked Adam;
``torch.optim.Adam.step`` itself still imports dynamo when something calls it.) :func:`skip_dynamo_import`
gives each wrapper its undecorated function as the cached "disabled" version, so calls go straight
to it. It changes nothing once ``torch._dynamo`` is imported (someone compiles), and nothing when
a torch release lays these functions out differently: then the import simply happens as before.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["skip_dynamo_import"]

_DONE = False
_METHODS = ("add_param_group", "state_dict", "load_state_dict", "zero_grad")


def _disable_wrappers(function: Any, depth: int = 0) -> Iterator[Any]:
    """`torch._disable_dynamo` wrappers reachable from `function` (itself or in its closure)."""
    code = getattr(function, "__code__", None)  # functools.wraps copies the names: recognise the code
    if code is not None and code.co_qualname == "_disable_dynamo.<locals>.inner":
        yield function
        return
    if depth < 2:
        for cell in getattr(function, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(value):
                yield from _disable_wrappers(value, depth + 1)


def skip_dynamo_import() -> None:
    """Route torch's dynamo-disabled optimizer functions to their plain versions (see module)."""
    global _DONE
    if _DONE or "torch._dynamo" in sys.modules:
        return
    _DONE = True
    from torch.optim import Optimizer

    for function in (getattr(Optimizer, name, None) for name in _METHODS):
        for wrapper in _disable_wrappers(function):
            plain = getattr(wrapper, "__wrapped__", None)
            if plain is not None and getattr(plain, "__dynamo_disable", None) is None:
                plain.__dynamo_disable = plain
