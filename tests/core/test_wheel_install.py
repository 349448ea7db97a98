"""The members as a user installs them: wheels built by ``uv build``, installed with plain pip into
a fresh venv from a local folder of wheels (no workspace, nothing editable), and each kind of
user's examples trained there from their manifests: the LLM user (agile-core + agile-llm:
`sft_tiny`, `grpo_tiny`, without PettingZoo, Minari or Box2D), the offline/bandit user
(agile-offline) and the RL user (agile-offpolicy, agile-onpolicy, agile-marl). Third-party packages come from the
lock through uv's cache first, so pip itself reads only the wheel folder (``--no-index``): the test
needs no network and checks exactly what pip resolves from agile's own wheel metadata."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.core.isolated import ROOT

pytestmark = pytest.mark.slow

SCRIPT = """
import importlib.util, json, sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
from agile_core.overrides import apply_overrides
from agile_core.specs.manifest import validate_source
from agile_core.trainer import LocalTrainer
from agile_core.yaml_source import read_manifest_file
configs, runs, absent = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
if (configs / 'llm').exists():
    from agile_llm.tiny import write_tiny
    write_tiny(configs / 'llm' / 'tiny')
for name, overrides in runs.items():
    started = time.monotonic()
    manifest = validate_source(apply_overrides(read_manifest_file(configs / 'training' / f'{name}.yaml'), overrides))
    population, fitnesses = LocalTrainer.from_manifest(manifest).train(verbose=False)
    assert len(fitnesses) == len(population) >= 1, fitnesses
    print(name, 'trained in', round(time.monotonic() - started, 1), 's')
for module in absent:
    assert importlib.util.find_spec(module) is None, module
print('wheel-install-ok')
"""

SHORT = ["training.max_steps=256", "training.evo_steps=128", "training.pop_size=2"]
USERS = {
    # who: (distributions pip installs, {manifest: overrides}, data folders the manifests read, modules absent)
    "llm": (["agile-llm"], {"sft_tiny": [], "grpo_tiny": []}, ["llm"],
            ["pettingzoo", "minari", "Box2D", "agile_offpolicy", "agile_marl", "agile_cli"]),
    "offline": (["agile-offline"], {"neural_ucb_iris": SHORT}, ["data"],
                ["pettingzoo", "transformers", "agile_llm", "agile_offpolicy", "agile_cli"]),
    "rl": (["agile-offpolicy", "agile-onpolicy", "agile-marl"],
           {"dqn_cartpole": [*SHORT, "training.learning_delay=64"], "ppo_cartpole": [*SHORT, "algorithm.learn_step=128"],
            "ippo_spread": [*SHORT, "environment.num_envs=2", "algorithm.learn_step=128", "algorithm.batch_size=64",
                            "mutation.rl_hp_selection.learn_step.min=64", "mutation.rl_hp_selection.batch_size.min=32"]},
           [], ["transformers", "minari", "agile_llm", "agile_offline", "agile_cli"]),
}


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)  # type: ignore[call-overload]


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv to build the wheels")
@pytest.mark.parametrize("user", sorted(USERS))
def test_member_wheels_install_with_plain_pip_and_train_their_examples(user: str, tmp_path: Path) -> None:
    members, runs, data, absent = USERS[user]
    started = time.monotonic()
    wheels = tmp_path / "wheels"
    for package in ("agile-core", *members):
        built = _run(["uv", "build", "--quiet", "--package", package, "--wheel", "-o", str(wheels)], cwd=ROOT)
        assert built.returncode == 0, built.stderr
    assert sorted(p.name.split("-")[0] for p in wheels.glob("*.whl")) == sorted(
        name.replace("-", "_") for name in ("agile-core", *members))
    built_at = time.monotonic()

    venv = tmp_path / "venv"
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    assert _run(["uv", "venv", "--quiet", "--seed", "--python", sys.executable, str(venv)], env=env).returncode == 0
    python = venv / "bin" / "python"
    requirements = tmp_path / "third-party.txt"
    exported = _run(["uv", "export", "--frozen", *(a for m in members for a in ("--package", m)), "--no-emit-workspace",
                     "--no-hashes", "--no-dev", "--no-header", "-o", str(requirements)], cwd=ROOT)
    assert exported.returncode == 0, exported.stderr
    third_party = _run(["uv", "pip", "install", "--quiet", "--python", str(python), "-r", str(requirements)], env=env)
    assert third_party.returncode == 0, third_party.stderr
    pip = _run([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheels), *members],
               env=env)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    listed = _run([str(python), "-m", "pip", "list", "--format", "freeze"], env=env).stdout.lower()
    assert all(f"{name}==" in listed for name in ("agile-core", *members)) and "editable" not in listed
    installed_at = time.monotonic()

    configs = tmp_path / "configs"
    (configs / "training").mkdir(parents=True)
    for name in runs:
        shutil.copy(ROOT / "configs" / "training" / f"{name}.yaml", configs / "training" / f"{name}.yaml")
    for folder in data:
        if folder == "llm":
            (configs / "llm").mkdir()  # the script writes the tiny model there, as configs/llm/make_tiny.py does
        else:
            shutil.copytree(ROOT / "configs" / folder, configs / folder)
    trained = _run([str(python), "-c", SCRIPT, str(configs), json.dumps(runs), json.dumps(absent)], cwd=tmp_path,
                   env={**env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert "wheel-install-ok" in trained.stdout
    print(f"\n{user} wheels: build {built_at - started:.0f} s, install {installed_at - built_at:.0f} s, "
          f"train {time.monotonic() - installed_at:.0f} s\n{trained.stdout}")
