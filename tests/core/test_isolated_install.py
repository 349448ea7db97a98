"""agile-core installed alone (no sibling member) imports and validates a toy paradigm's manifest."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOY = Path(__file__).parent / "toy_paradigm"

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
from agile_core.specs.manifest import TrainingManifest
from agile_core.errors import ManifestError
m = TrainingManifest.get_validated({'algorithm': {'name': 'ToyAlgo', 'lr': 0.5}, 'environment': {'name': 't', 'difficulty': 3}})
assert m.paradigm_name == 'toy', m.paradigm_name
try:
    TrainingManifest.get_validated({'algorithm': {'name': 'DQN'}, 'environment': {'name': 'CartPole-v1'}})
except ManifestError as exc:
    assert 'agile-offpolicy' in str(exc), str(exc)
else:
    raise SystemExit('DQN validated without agile-offpolicy')
siblings = [m for m in sys.modules if m.startswith(('agile_offpolicy', 'agile_onpolicy', 'agile_cli', 'agile_marl', 'agile_offline', 'agile_llm', 'agile_arena'))]
assert not siblings, siblings
print('isolated-ok')
"""


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv to build an isolated environment")
def test_agile_core_alone_validates_a_toy_paradigm(tmp_path):
    constraints = tmp_path / "constraints.txt"
    exported = subprocess.run(
        ["uv", "export", "--frozen", "--package", "agile-core", "--no-hashes", "--no-emit-workspace",
         "--no-dev", "--no-header", "-o", str(constraints)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert exported.returncode == 0, exported.stderr
    venv = tmp_path / "venv"
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    subprocess.run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, env=env)
    python = venv / "bin" / "python"
    install = subprocess.run(
        ["uv", "pip", "install", "--quiet", "--python", str(python), "-c", str(constraints),
         str(ROOT / "packages" / "agile-core"), str(TOY)],
        capture_output=True, text=True, env=env,
    )
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(["uv", "pip", "list", "--python", str(python)], capture_output=True, text=True, env=env).stdout
    assert "agile-offpolicy" not in listed and "agile-cli" not in listed
    result = subprocess.run([str(python), "-c", SCRIPT], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "isolated-ok" in result.stdout
