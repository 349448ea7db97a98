"""A run that never compiles never imports torch._dynamo (1.3-1.5 s and ~100 MB of start-up), and
the optimizer functions torch wraps for dynamo behave exactly as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import sys
import torch
from agile_core.dynamo_free import skip_dynamo_import
skip_dynamo_import()
torch.manual_seed(0)
weights = torch.nn.Parameter(torch.randn(4, 3))
optimizer = torch.optim.Adam([weights], lr=0.1)
optimizer.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))], "lr": 0.5})
(weights ** 2).sum().backward()
optimizer.zero_grad()
state = optimizer.state_dict()
again = torch.optim.Adam([weights], lr=0.1)
again.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))]})
again.load_state_dict(state)
assert again.param_groups[1]["lr"] == 0.5
print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo", weights.grad, len(state["param_groups"]),
      state["param_groups"][1]["lr"])
"""


def _run(code: str, *args: str) -> str:
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_optimizer_methods_without_dynamo_behave_as_before() -> None:
    patched = _run(CHECK).split(maxsplit=2)
    plain = _run(CHECK.replace("skip_dynamo_import()\n", "")).split(maxsplit=1)
    assert patched[:2] == ["no", "dynamo"] and plain[0] == "dynamo"
    assert patched[2] == plain[1]


def test_a_short_training_run_never_imports_dynamo(tmp_path: Path) -> None:
    code = ("import sys\nfrom agile_cli.main import main\n"
            "assert main(sys.argv[1:]) == 0\nprint('torch._dynamo' in sys.modules)")
    out = _run(code, "train", str(ROOT / "configs/training/dqn_cartpole.yaml"), "--quiet", "--run-dir",
               str(tmp_path / "run"), "--set", "training.max_steps=128", "--set", "training.evo_steps=128",
               "--set", "training.learning_delay=32", "--set", "training.eval_steps=10")
    assert out.strip().splitlines()[-1] == "False"
