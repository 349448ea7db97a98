"""Isolated installs of workspace members: a fresh venv with only the named packages (built from
their folders, not editable, with the locked versions of their dependencies)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def install_alone(folder: Path, *members: str) -> tuple[Path, str]:
    """A venv in `folder` with agile-core and `members` (distribution names) installed from their
    package folders, constrained to the lock; returns (its python, ``uv pip list`` output)."""
    constraints = folder / "constraints.txt"
    exported = subprocess.run(
        ["uv", "export", "--frozen", *(arg for member in members or ("agile-core",) for arg in ("--package", member)),
         "--no-hashes", "--no-emit-workspace", "--no-dev", "--no-header", "-o", str(constraints)],
        cwd=ROOT, capture_output=True, text=True)
    assert exported.returncode == 0, exported.stderr
    venv = folder / "venv"
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    subprocess.run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, env=env)
    python = venv / "bin" / "python"
    install = subprocess.run(
        # --no-sources: a member's workspace source for agile-core would install it editable.
        ["uv", "pip", "install", "--quiet", "--no-sources", "--python", str(python), "-c", str(constraints),
         str(ROOT / "packages" / "agile-core"), *(str(ROOT / "packages" / member) for member in members)],
        capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(["uv", "pip", "list", "--python", str(python)], capture_output=True, text=True,
                            env=env).stdout
    assert not list((venv / "lib").glob("python*/site-packages/*editable*")), "installed editable"
    return python, listed
