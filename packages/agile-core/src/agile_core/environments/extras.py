"""Environments whose packages are optional: registering them when a manifest names them, and
errors that give the exact install command when their package is missing.

Box2D (LunarLander, BipedalWalker) is part of the default install of ``agile-rl-suite`` (through
agile-offpolicy and agile-onpolicy). Atari, MuJoCo and PettingZoo's butterfly environments are
extras::

    pip install "agile-rl-suite[atari]"       # or, in the agile workspace: uv sync --extra atari
    pip install "agile-rl-suite[mujoco]"      # uv sync --extra mujoco
    pip install "agile-rl-suite[butterfly]"   # uv sync --extra butterfly
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["ENV_EXTRAS", "META_PACKAGE", "EnvExtra", "install_hint", "missing_extra_message", "missing_module",
           "register_env_namespace"]

META_PACKAGE = "agile-rl-suite"
"""The distribution whose extras the install commands name."""


@dataclass(frozen=True)
class EnvExtra:
    """An optional package some environments (or wrappers) need, and how to install it."""

    package: str
    """The PyPI package that is missing when they cannot be made, e.g. ``ale-py``."""
    used_for: str
    """What it provides, e.g. ``Atari environments``."""
    extra: str | None
    """The extra of ``agile-rl-suite`` that installs `package`; None when agile has no extra for it."""
    pip: str | None = None
    """The pip requirement to name when there is no agile extra (default: `package`)."""

    def install_command(self) -> str:
        """The command that installs it, e.g. ``pip install "agile-rl-suite[atari]" (...)``."""
        if self.extra is None:
            return f'pip install "{self.pip or self.package}"'
        return f'pip install "{META_PACKAGE}[{self.extra}]" (in the agile workspace: uv sync --extra {self.extra})'

    def message(self, what: str) -> str:
        """``<what> needs <package>, which is not installed (<used_for>): <install command>``."""
        return f"{what} needs {self.package}, which is not installed ({self.used_for}): {self.install_command()}"


ENV_EXTRAS: dict[str, EnvExtra] = {
    "ale_py": EnvExtra("ale-py", "Atari environments", "atari"),
    "cv2": EnvExtra("opencv-python-headless", "OpenCV, used by Gymnasium's image wrappers", "atari"),
    "mujoco": EnvExtra("mujoco", "MuJoCo environments", "mujoco"),
    "pymunk": EnvExtra("pymunk", "PettingZoo butterfly environments", "butterfly"),
    # in agile-offpolicy's and agile-onpolicy's default dependencies (wheels: no swig, no build)
    "Box2D": EnvExtra("box2d", "Box2D environments, part of the default install of agile-offpolicy "
                      "and agile-onpolicy", None, pip="gymnasium[box2d]"),
    "multi_agent_ale_py": EnvExtra("multi-agent-ale-py", "PettingZoo Atari environments", None,
                                   pip="pettingzoo[atari]"),
}
"""Top-level module -> the optional package that provides it."""

_NAMESPACES = {"ALE": "ale_py"}
"""Gymnasium id namespaces registered by importing a module (Gymnasium 1.x has no plugin hook)."""


def install_hint(module: str | None) -> EnvExtra | None:
    """The optional package a missing `module` (a dotted name: its top level counts) comes from."""
    if not module:
        return None
    return ENV_EXTRAS.get(module.partition(".")[0])


def missing_module(exc: BaseException) -> str | None:
    """The module whose absence raised `exc`, directly or as the error `exc` was raised from."""
    error: BaseException | None = exc
    for _ in range(8):
        if error is None:
            break
        if isinstance(error, ImportError) and error.name:
            return error.name
        error = error.__cause__
    return None


def missing_extra_message(what: str, exc: BaseException) -> str | None:
    """The install message for `what` when `exc` comes from a missing optional package, else None."""
    hint = install_hint(missing_module(exc))
    return None if hint is None else hint.message(what)


def _namespace(env_id: str) -> str | None:
    name = env_id.rpartition(":")[2]
    return name.partition("/")[0] if "/" in name else None


def register_env_namespace(env_id: str) -> None:
    """Import the package that registers `env_id`'s namespace (``ALE/...``: ale_py) unless that
    namespace is registered already. Raises ImportError naming the install command when the
    package is missing."""
    import gymnasium as gym

    namespace = _namespace(env_id)
    module = _NAMESPACES.get(namespace or "")
    if module is None or any(spec.namespace == namespace for spec in gym.registry.values()):
        return
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(ENV_EXTRAS[module].message(f"'{env_id}'"), name=module) from exc
    gym.register_envs(loaded)
