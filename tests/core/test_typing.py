"""mypy over every package (the files and settings of `[tool.mypy]` in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_checks_every_package() -> None:
    configured = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    packages = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "packages").glob("*/src"))
    assert set(packages) <= set(configured), "a package is left out of [tool.mypy] files"


def test_mypy_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
