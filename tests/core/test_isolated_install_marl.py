"""agile-core + agile-marl installed alone (no agile-offpolicy, agile-onpolicy or agile-cli) train
the IPPO example manifest for a few hundred steps through ``LocalTrainer.from_manifest``, with
``--set``-style overrides. Same isolated-environment recipe as ``test_isolated_install.py``."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.core.isolated import install_alone

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
import torch
torch.set_num_threads(1)
from agile_core.overrides import apply_overrides
from agile_core.specs.manifest import validate_source
from agile_core.trainer import LocalTrainer
from agile_core.yaml_source import read_manifest_file
overrides = ['training.max_steps=256', 'training.evo_steps=128', 'training.pop_size=2', 'training.eval_loop=1',
             'environment.num_envs=2', 'algorithm.learn_step=128', 'algorithm.batch_size=64',
             'algorithm.update_epochs=1', 'mutation.rl_hp_selection.learn_step.min=64']
manifest = validate_source(apply_overrides(read_manifest_file(sys.argv[1]), overrides))
assert manifest.paradigm_name == 'multi_agent_on_policy', manifest.paradigm_name
population, fitnesses = LocalTrainer.from_manifest(manifest).train(verbose=False)
assert len(population) == 2 and len(fitnesses) == 2, (population, fitnesses)
assert all(agent.steps == 256 and len(agent.fitness) == 2 for agent in population), \\
    [(agent.steps, agent.fitness) for agent in population]
siblings = [m for m in sys.modules if m.startswith(('agile_offpolicy', 'agile_onpolicy', 'agile_cli', 'agile_offline',
                                                      'agile_llm', 'agile_arena'))]
assert not siblings, siblings
print('isolated-marl-ok', fitnesses)
"""


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv to build an isolated environment")
def test_agile_core_and_marl_alone_train_the_ippo_example(tmp_path):
    python, listed = install_alone(tmp_path, "agile-marl")
    assert "agile-marl" in listed
    assert "agile-offpolicy" not in listed and "agile-onpolicy" not in listed and "agile-cli" not in listed
    result = subprocess.run([str(python), "-c", SCRIPT, str(ROOT / "configs" / "training" / "ippo_spread.yaml")],
                            capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "isolated-marl-ok" in result.stdout
