"""The multi-agent guide's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "paradigms" / "multi-agent.md"
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)


def test_the_guide_has_examples() -> None:
    assert BLOCKS


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_guide_example_runs(index: int) -> None:
    torch.set_num_threads(1)
    exec(compile(BLOCKS[index], f"{GUIDE.name}[{index}]", "exec"), {"__name__": "guide_example"})
