"""agile-core + agile-llm installed alone (no RL paradigm package, PettingZoo, Minari, Box2D, vllm
or the CLI) make the tiny example model (configs/llm/make_tiny.py) and train SFT and GRPO
populations from Python on it; with agile-cli added (`pip install agile-cli`), `agile train` runs
the SFT example manifest and `agile evaluate` scores the saved elite. Same isolated-environment recipe as the other
``test_isolated_install_*`` tests: torch, transformers and peft come from the local uv cache."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.core.isolated import ROOT, install_alone

pytestmark = pytest.mark.slow

ABSENT = ("agile-offpolicy", "agile-onpolicy", "agile-marl", "agile-offline", "agile-arena", "pettingzoo",
          "minari", "box2d", "vllm")

SCRIPT = """
import runpy, sys
from pathlib import Path
import agile_llm
assert 'vllm' not in sys.modules and 'torch' not in sys.modules, 'import agile_llm pulled in vllm or torch'
import torch
torch.set_num_threads(1)
# The docs' first step, in this process: python configs/llm/make_tiny.py OUT_DIR
make_tiny, out = sys.argv[1], Path(sys.argv[2])
sys.argv = [make_tiny, str(out)]
try:
    runpy.run_path(make_tiny, run_name='__main__')
except SystemExit as exit:
    assert not exit.code, exit.code
from agile_llm import GRPO, SFT, DatasetEnv, PromptAnswerEnv, RolloutHarness, SharedBase
from agile_llm import train_llm_dataset, train_llm_rollout
from agile_llm.tiny import PROMPT_TEMPLATE, answer_rows, digit_reward, number_rows

lora = {'lora_r': 4, 'lora_alpha': 8, 'lora_dropout': 0.0, 'target_modules': ['q_proj', 'v_proj']}
base = SharedBase.get(str(out / 'model'), lora)  # a local directory, nothing downloaded
tokenizer = base.tokenizer

env = DatasetEnv(number_rows(), tokenizer, 'sft', prompt_template=PROMPT_TEMPLATE, test_fraction=0.2)
pop = [SFT(base, lr=1e-2, batch_size=8, max_length=32, index=i, seed=i) for i in range(2)]
pop, fitnesses = train_llm_dataset(pop, env, max_steps=4, evo_steps=2, verbose=False, seed=0)
assert len(fitnesses) == 2 and all(agent.steps == 4 for agent in pop), fitnesses
print('sft', fitnesses)

rows = answer_rows()
def env_factory():
    text_env = PromptAnswerEnv(rows, digit_reward, prompt_template=PROMPT_TEMPLATE, test_fraction=0.1)
    return RolloutHarness(text_env, tokenizer, max_turns=1, max_model_len=32)
pop = [GRPO(base, lr=1e-2, batch_size=2, group_size=2, max_new_tokens=3, max_length=32, beta=0.0, index=i,
            seed=i) for i in range(2)]
pop, fitnesses = train_llm_rollout(pop, max_turns=1, env_factory=env_factory, max_steps=2, evo_steps=1,
                                   verbose=False, seed=0)
assert len(fitnesses) == 2 and all(agent.steps == 2 for agent in pop), fitnesses
print('grpo', fitnesses)
loaded = [m for m in sys.modules if m.startswith(('agile_offpolicy', 'agile_onpolicy', 'agile_marl', 'agile_offline',
                                                    'agile_cli', 'agile_arena', 'pettingzoo', 'minari', 'Box2D',
                                                    'vllm'))]
assert not loaded, loaded
print('isolated-llm-ok')
"""


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv to build an isolated environment")
def test_agile_core_and_llm_alone_train_then_the_cli_runs_the_sft_example(tmp_path: Path) -> None:
    started = time.monotonic()
    python, listed = install_alone(tmp_path, "agile-llm")
    assert "agile-llm" in listed and all(name in listed for name in ("torch", "transformers", "peft"))
    for absent in (*ABSENT, "agile-cli"):
        assert absent not in listed.lower(), absent
    configs = tmp_path / "configs"
    (configs / "training").mkdir(parents=True)
    shutil.copy(ROOT / "configs" / "training" / "sft_tiny.yaml", configs / "training" / "sft_tiny.yaml")
    result = _run([str(python), "-c", SCRIPT, str(ROOT / "configs" / "llm" / "make_tiny.py"),
                   str(configs / "llm" / "tiny")], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "isolated-llm-ok" in result.stdout
    python_done = time.monotonic()

    # Add the command as the docs say (pip install agile-cli), constrained to the lock like the rest.
    constraints = tmp_path / "cli-constraints.txt"
    exported = subprocess.run(
        ["uv", "export", "--frozen", "--package", "agile-llm", "--package", "agile-cli", "--no-hashes",
         "--no-emit-workspace", "--no-dev", "--no-header", "-o", str(constraints)],
        cwd=ROOT, capture_output=True, text=True)
    assert exported.returncode == 0, exported.stderr
    env = {**os.environ, "VIRTUAL_ENV": str(tmp_path / "venv")}
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    install = subprocess.run(["uv", "pip", "install", "--quiet", "--no-sources", "--python", str(python), "-c",
                              str(constraints), str(ROOT / "packages" / "agile-cli")],
                             capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(["uv", "pip", "list", "--python", str(python)], capture_output=True, text=True,
                            env=env).stdout.lower()
    assert "agile-cli" in listed and not any(absent in listed for absent in ABSENT)
    agile = str(python.parent / "agile")

    # The example as the docs run it (its tiny model and data were made above by make_tiny.py).
    run_dir = tmp_path / "runs" / "sft"
    trained = _run([agile, "train", str(configs / "training" / "sft_tiny.yaml"), "--set", "training.max_steps=4",
                    "--set", "training.evo_steps=2", "--run-dir", str(run_dir), "--save-elite", "--quiet"], tmp_path)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert (run_dir / "summary.json").is_file() and (run_dir / "elite").is_dir()
    evaluated = _run([agile, "evaluate", str(run_dir / "elite"), "--manifest",
                      str(configs / "training" / "sft_tiny.yaml"), "--json"], tmp_path)
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    assert '"metric": "loss"' in evaluated.stdout
    print(f"\nisolated agile-llm: install + Python training {python_done - started:.0f} s, "
          f"CLI install + agile train + agile evaluate {time.monotonic() - python_done:.0f} s")
