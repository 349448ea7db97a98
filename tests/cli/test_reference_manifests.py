"""Manifests written the reference trainer's way validate and briefly train unchanged.

One manifest per way the reference's own examples differ from agile's native form (the
`network.arch` shorthand, initial values outside their mutation range, the evolvable networks'
`init_layers`/`output_vanish`, SimBa encoders, `action_std_init: 0.0` on discrete actions,
`learning_delay` in an offline manifest, `cudagraphs`, bandit tables found from the working
directory, the parameter-noise bands), plus one per example environment family.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agile_cli.main import main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

DQN_ARCH = """
algorithm:
    name: DQN
    batch_size: 64
    lr: 0.001
    learn_step: 16
    gamma: 0.99
    tau: 0.001
    double: true
    cudagraphs: false
environment:
    name: CartPole-v1
    num_envs: 4
network:
    latent_dim: 32
    arch: mlp
    encoder_config:
        hidden_size: [32]
        output_vanish: true
        init_layers: true
    head_config:
        hidden_size: [32]
        output_vanish: false
mutation:
    probabilities: {no_mut: 0.4, arch_mut: 0.2, new_layer: 0.2, params_mut: 0.2, act_mut: 0.0, rl_hp_mut: 0.2}
    rl_hp_selection:
        lr: {min: 0.0001, max: 0.01}
        learn_step: {min: 20, max: 200}
    mutation_sd: 0.1
    rand_seed: 42
    amplified_gauss_param_mut: true
    random_reset_param_mut: true
tournament_selection:
    tournament_size: 2
    elitism: true
training:
    max_steps: 2_000
    pop_size: 2
    evo_steps: 1_000
    eval_loop: 1
    learning_delay: 200
"""

PPO_OUTSIDE_RANGE = """
algorithm:
    name: PPO
    learn_step: 1024
    batch_size: 64
    update_epochs: 2
environment: {name: CartPole-v1, num_envs: 4}
network:
    arch: mlp
    latent_dim: 32
    encoder_config: {hidden_size: [32], init_layers: true}
    head_config: {hidden_size: [32], output_vanish: true}
mutation:
    rl_hp_selection:
        learn_step: {min: 128, max: 512}
training: {max_steps: 2048, pop_size: 2, evo_steps: 1024}
"""

DDPG_SIMBA = """
algorithm: {name: DDPG, learn_step: 4, batch_size: 32}
environment: {name: Pendulum-v1, num_envs: 2}
network:
    latent_dim: 32
    simba: true
    encoder_config: {hidden_size: 32, num_blocks: 2}
    head_config: {hidden_size: [32]}
training: {max_steps: 1000, pop_size: 2, evo_steps: 500, learning_delay: 100}
"""

PPO_ARCH_SIMBA = """
algorithm: {name: PPO, learn_step: 512, update_epochs: 1}
environment: {name: CartPole-v1, num_envs: 2}
network:
    arch: simba
    encoder_config: {hidden_size: [32], num_blocks: 1}
training: {max_steps: 1024, pop_size: 2, evo_steps: 512}
"""

IPPO_DISCRETE = """
algorithm: {name: IPPO, action_std_init: 0.0, learn_step: 128}
environment: {name: mpe2.simple_spread_v3, num_envs: 2, config: {max_cycles: 25}}
network:
    arch: mlp
    latent_dim: 16
    encoder_config: {hidden_size: [16]}
training: {max_steps: 256, pop_size: 2, evo_steps: 128}
"""

CQN_DELAY = """
algorithm: {name: CQN}
environment: {name: CartPole-v1, dataset_path: data.h5}
training: {max_steps: 1000, evo_steps: 500, learning_delay: 1000}
"""

BANDIT_FROM_CWD = """
algorithm: {name: NeuralUCB}
environment:
    name: IRIS
    features: tests/data/iris_features.csv
    targets: tests/data/iris_targets.csv
training: {max_steps: 200, pop_size: 2, evo_steps: 100, eval_steps: 50}
"""


def write(folder: Path, text: str, name: str = "manifest.yaml") -> Path:
    file = folder / name
    file.write_text(textwrap.dedent(text))
    return file


def agile(*args: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agile_cli.main", *args], capture_output=True, text=True,
                          env=ENV, cwd=cwd, timeout=timeout)


def trains(manifest: Path, run_dir: Path, cwd: Path = ROOT) -> dict:
    result = agile("train", str(manifest), "--quiet", "--run-dir", str(run_dir), cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize(("text", "warned"), [
    (DQN_ARCH, ["mutation.rl_hp_selection.learn_step: the initial value algorithm.learn_step=16 lies outside [20, 200]"]),
    (PPO_OUTSIDE_RANGE, ["mutation.rl_hp_selection.learn_step: the initial value algorithm.learn_step=1024"]),
    (DDPG_SIMBA, []),
    (PPO_ARCH_SIMBA, []),
], ids=["dqn-arch-init-bands-cudagraphs", "ppo-outside-range", "ddpg-simba", "ppo-arch-simba"])
def test_reference_style_manifest_validates_and_trains(tmp_path, text, warned):
    manifest = write(tmp_path, text)
    result = agile("validate", str(manifest))
    assert result.returncode == 0, result.stderr
    for expected in warned:
        assert expected in result.stderr
    assert result.stderr.count("warning:") == len(warned), result.stderr
    summary = trains(manifest, tmp_path / "run")
    assert len(summary["agents"]) == 2


def test_simba_manifest_builds_simba_encoders(tmp_path):
    from agile_core.specs.manifest import TrainingManifest

    spec = TrainingManifest.from_text(textwrap.dedent(DDPG_SIMBA)).network
    assert spec.simba and spec.encoder_config.arch == "simba" and spec.encoder_config.hidden_size == 32
    assert TrainingManifest.from_text(textwrap.dedent(PPO_ARCH_SIMBA)).network.simba


def test_ippo_with_zero_action_std_on_discrete_actions_trains(tmp_path):
    pytest.importorskip("mpe2")
    summary = trains(write(tmp_path, IPPO_DISCRETE), tmp_path / "run")
    assert len(summary["agents"]) == 2


def test_a_training_field_offline_does_not_use_draws_one_warning(tmp_path, capsys):
    (tmp_path / "data.h5").write_bytes(b"")
    assert main(["validate", str(write(tmp_path, CQN_DELAY))]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert "training.learning_delay: is not used by the offline paradigm (CQN); ignored (got 1000)" in err


def test_cudagraphs_true_is_accepted_with_a_warning(tmp_path, capsys):
    text = DQN_ARCH.replace("cudagraphs: false", "cudagraphs: true")
    assert main(["validate", str(write(tmp_path, text))]) == 0
    assert "algorithm.cudagraphs: agile does not capture CUDA graphs; ignored" in capsys.readouterr().err


def test_wrong_values_are_still_refused_precisely(tmp_path, capsys):
    bad = DDPG_SIMBA.replace("num_blocks: 2", "num_blocks: 9")
    assert main(["validate", str(write(tmp_path, bad))]) == 2
    assert "network.encoder_config.num_blocks: 9 is outside [min_blocks=1, max_blocks=4]" in capsys.readouterr().err
    conflict = DQN_ARCH.replace("arch: mlp", "arch: cnn")
    conflict = conflict.replace("    encoder_config:\n", "    encoder_config:\n        arch: mlp\n")
    assert main(["validate", str(write(tmp_path, conflict, "conflict.yaml"))]) == 2
    assert "disagree" in capsys.readouterr().err
    typo = DQN_ARCH.replace("cudagraphs: false", "cudagraphs: maybe")
    assert main(["validate", str(write(tmp_path, typo, "typo.yaml"))]) == 2
    assert "algorithm.cudagraphs: input should be a valid boolean" in capsys.readouterr().err


def test_bandit_tables_resolve_from_the_manifest_folder_then_the_working_directory(tmp_path):
    work = tmp_path / "work"
    (work / "tests" / "data").mkdir(parents=True)
    for name in ("iris_features.csv", "iris_targets.csv"):
        (work / "tests" / "data" / name).write_bytes((ROOT / "configs" / "data" / name).read_bytes())
    elsewhere = tmp_path / "manifests"
    elsewhere.mkdir()
    manifest = write(elsewhere, BANDIT_FROM_CWD)
    summary = trains(manifest, tmp_path / "run", cwd=work)
    assert len(summary["agents"]) == 2
    missing = agile("validate", str(manifest), cwd=tmp_path)
    assert missing.returncode == 2
    assert f"file not found (looked in {elsewhere} and {tmp_path})" in missing.stderr


def test_network_random_seed_and_regrama_are_accepted_with_a_warning_each(tmp_path, capsys):
    text = DQN_ARCH.replace("    latent_dim: 32\n", "    latent_dim: 32\n    random_seed: 7\n")
    text = text.replace("    rand_seed: 42\n", "    rand_seed: 42\n    regrama_param_mut: true\n    dormant_threshold: 0.01\n")
    assert main(["validate", str(write(tmp_path, text))]) == 0
    err = capsys.readouterr().err
    for path in ("network.random_seed", "mutation.regrama_param_mut", "mutation.dormant_threshold"):
        assert f"warning: {path}:" in err, err
