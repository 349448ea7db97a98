"""Every Python example in the README and docs/ runs as written, each in a fresh temporary folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [(page.relative_to(ROOT).as_posix(), index, block) for page in PAGES
          for index, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S))]


def test_the_docs_have_python_examples() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize(("page", "index", "block"), BLOCKS, ids=[f"{page}[{index}]" for page, index, _ in BLOCKS])
def test_docs_example_runs(page: str, index: int, block: str, tmp_path, monkeypatch) -> None:
    torch.set_num_threads(1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    exec(compile(block, f"{page}[{index}]", "exec"), {"__name__": "docs_example"})
