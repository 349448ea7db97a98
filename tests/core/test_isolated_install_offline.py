"""agile-core + agile-offline installed alone (no PettingZoo, Box2D, agile-offpolicy or the CLI)
record a dataset, validate and train the CQN and bandit example manifests for a few steps."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.core.isolated import install_alone

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "training"

pytestmark = pytest.mark.slow

SCRIPT = """
import shutil, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from agile_core.overrides import apply_overrides
from agile_core.specs.manifest import validate_source
from agile_core.trainer import LocalTrainer
from agile_core.yaml_source import read_manifest_file
from agile_offline import record, write_hdf5
cqn, folder = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copy(cqn, folder / cqn.name)
write_hdf5(record('CartPole-v1', None, episodes=10, seed=0, progress=False), folder / 'cartpole_mixed.h5')
tiny = ['training.max_steps=40', 'training.evo_steps=20', 'training.pop_size=2', 'training.eval_loop=1',
        'training.eval_steps=50']
for path in [folder / cqn.name, *sys.argv[3:]]:
    manifest = validate_source(apply_overrides(read_manifest_file(path), tiny))
    population, fitnesses = LocalTrainer.from_manifest(manifest).train(verbose=False)
    assert len(population) == 2 and len(fitnesses) == 2, (population, fitnesses)
    print(manifest.algorithm.name, fitnesses)
siblings = [m for m in sys.modules if m.startswith(('agile_offpolicy', 'agile_onpolicy', 'agile_cli', 'agile_marl',
                                                      'agile_llm', 'agile_arena', 'pettingzoo', 'Box2D'))]
assert not siblings, siblings
print('isolated-offline-ok')
"""


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv to build an isolated environment")
def test_agile_core_and_offline_alone_train_the_examples(tmp_path):
    python, listed = install_alone(tmp_path, "agile-offline")
    assert "agile-offline" in listed and "minari" in listed
    for absent in ("agile-offpolicy", "agile-onpolicy", "agile-cli", "agile-marl", "pettingzoo", "box2d"):
        assert absent not in listed.lower(), absent
    bandits = sorted(str(path) for path in CONFIGS.glob("neural_*.yaml"))
    assert bandits, "no bandit example manifests"
    result = subprocess.run([str(python), "-c", SCRIPT, str(CONFIGS / "cqn_cartpole.yaml"), str(tmp_path), *bandits],
                            capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "isolated-offline-ok" in result.stdout
