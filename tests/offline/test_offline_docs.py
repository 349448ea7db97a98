"""The offline and bandit guides' Python examples run as written (in a temporary folder)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

DOCS = Path(__file__).resolve().parents[2] / "docs" / "paradigms"
BLOCKS = [(guide.name, index, block) for guide in (DOCS / "offline.md", DOCS / "bandits.md") if guide.exists()
          for index, block in enumerate(re.findall(r"```python\n(.*?)```", guide.read_text(), flags=re.S))]


def test_the_offline_guide_has_examples() -> None:
    assert any(name == "offline.md" for name, _, _ in BLOCKS)


@pytest.mark.parametrize(("name", "index", "block"), BLOCKS, ids=[f"{name}[{index}]" for name, index, _ in BLOCKS])
def test_guide_example_runs(name: str, index: int, block: str, tmp_path, monkeypatch) -> None:
    torch.set_num_threads(1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    exec(compile(block, f"{name}[{index}]", "exec"), {"__name__": "guide_example"})
