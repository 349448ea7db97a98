"""The shape the codebase keeps: small modules, and files that describe the product, not its history."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 650
HISTORY = re.compile("(sess" + r"ion [0-9]|iss" + r"ue [0-9#])", re.IGNORECASE)  # split so this file does not match


def _tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if listed.returncode != 0:  # not a git checkout (an unpacked source tree): every file
        return [path for path in ROOT.rglob("*") if path.is_file() and ".venv" not in path.parts]
    return [ROOT / name for name in listed.stdout.splitlines() if (ROOT / name).is_file()]


def test_no_module_is_longer_than_the_limit() -> None:
    long = {str(path.relative_to(ROOT)): count for path in (ROOT / "packages").rglob("*.py")
            if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules by concern (at most {MAX_MODULE_LINES} lines): {long}"


def test_no_file_narrates_the_work_history() -> None:
    found = []
    for path in _tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{path.relative_to(ROOT)}: {match.group(0)}" for match in HISTORY.finditer(text)]
    assert not found, found


def test_the_history_pattern_can_match() -> None:
    assert HISTORY.search("as measured in Ses" + "sion 4") and not HISTORY.search("an issue with sessions")
