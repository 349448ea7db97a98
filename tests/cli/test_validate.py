"""`agile validate`: every bad manifest gets its exact path, line and exit code 2."""

import json
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from agile_cli.main import main

GOOD = """\
algorithm:
  name: DQN
  lr: 1.0e-3
environment:
  name: CartPole-v1
  num_envs: 8
training:
  max_steps: 20000
  pop_size: 4
  evo_steps: 5000
"""

# (id, manifest text, expected "LINE: dotted.path" prefix of the first reported issue)
BAD = [
    ("lr-negative", GOOD.replace("lr: 1.0e-3", "lr: -0.1"), "3: algorithm.lr: input should be greater than 0 (got -0.1)"),
    ("lr-string", GOOD.replace("lr: 1.0e-3", "lr: fast"), "3: algorithm.lr: input should be a valid number"),
    ("unknown-algo-key", GOOD.replace("  lr: 1.0e-3", "  lr: 1.0e-3\n  learning_rate: 3"), "4: algorithm.learning_rate: unknown field; did you mean"),
    ("algo-name-case", GOOD.replace("name: DQN", "name: dqn"), "2: algorithm.name: unknown algorithm 'dqn'; did you mean 'DQN'?"),
    ("algo-name-missing", GOOD.replace("  name: DQN\n", ""), "1: algorithm.name: required field is missing"),
    ("algo-name-number", GOOD.replace("name: DQN", "name: 5"), "2: algorithm.name: must be a string"),
    ("algorithm-missing", GOOD.replace("algorithm:\n  name: DQN\n  lr: 1.0e-3\n", ""), "algorithm: required section is missing"),
    ("environment-missing", GOOD.split("environment:")[0], "environment: required section is missing"),
    ("num-envs-zero", GOOD.replace("num_envs: 8", "num_envs: 0"), "6: environment.num_envs: input should be greater than or equal to 1 (got 0)"),
    ("num-envs-float", GOOD.replace("num_envs: 8", "num_envs: 2.5"), "6: environment.num_envs: input should be a valid integer"),
    ("env-unknown-key", GOOD.replace("  num_envs: 8", "  num_envs: 8\n  vectorize: true"), "7: environment.vectorize: unknown field"),
    ("env-entrypoint-form", GOOD.replace("  num_envs: 8", "  num_envs: 8\n  entrypoint: not-valid"), "7: environment.entrypoint: must have the form"),
    ("env-path-missing", GOOD.replace("  num_envs: 8", "  num_envs: 8\n  path: nowhere/env.py"), "7: environment.path: file not found"),
    ("pop-size-negative", GOOD.replace("pop_size: 4", "pop_size: -1"), "9: training.pop_size: input should be greater than or equal to 1 (got -1)"),
    ("population-size-alias-bad", GOOD.replace("pop_size: 4", "population_size: 0"), "9: training.population_size: input should be greater than or equal to 1"),
    ("evo-exceeds-max", GOOD.replace("evo_steps: 5000", "evo_steps: 50000"), "10: training.evo_steps: must not exceed max_steps (20000)"),
    ("training-unknown-key", GOOD + "  epochs: 3\n", "11: training.epochs: unknown field; did you mean"),
    ("training-not-mapping", GOOD.replace("training:\n  max_steps: 20000\n  pop_size: 4\n  evo_steps: 5000\n", "training: 5\n"), "7: training: must be a mapping"),
    ("eps-out-of-range", GOOD + "  eps_start: 2.0\n", "11: training.eps_start: input should be less than or equal to 1"),
    ("unknown-section", GOOD + "trainer:\n  x: 1\n", "11: trainer: unknown section; did you mean 'training'?"),
    ("network-hidden-too-wide", GOOD + "network:\n  encoder_config:\n    hidden_size: [64, 1024]\n", "13: network.encoder_config.hidden_size[1]: 1024 is outside"),
    ("network-bad-activation", GOOD + "network:\n  head_config:\n    activation: Swish\n", "13: network.head_config.activation: input should be"),
    ("network-unknown-key", GOOD + "network:\n  encoder_config:\n    hidden_size: [64]\n    dropout: 0.1\n", "14: network.encoder_config.dropout: unknown field"),
    ("network-latent-bounds", GOOD + "network:\n  latent_dim: 512\n", "12: network.latent_dim: 512 is outside"),
    ("cnn-length-mismatch", GOOD + "network:\n  encoder_config:\n    channel_size: [8, 8]\n    kernel_size: [3]\n    stride_size: [1, 1]\n", "14: network.encoder_config.kernel_size: channel_size, kernel_size and stride_size must have the same length"),
    ("mutation-unknown-hp", GOOD + "mutation:\n  rl_hp_selection:\n    momentum: {min: 0.1, max: 0.9}\n", "13: mutation.rl_hp_selection.momentum: DQN has no numeric hyperparameter 'momentum'"),
    ("mutation-bool-hp", GOOD + "mutation:\n  rl_hp_selection:\n    double: {min: 0, max: 1}\n", "13: mutation.rl_hp_selection.double: DQN has no numeric hyperparameter 'double'"),
    ("mutation-range-gamma-above-1", GOOD + "mutation:\n  rl_hp_selection:\n    gamma: {min: 0.9, max: 2}\n", "13: mutation.rl_hp_selection.gamma.max: mutation could set gamma to 2, which gamma itself refuses"),
    ("mutation-range-lr-negative", GOOD + "mutation:\n  rl_hp_selection:\n    lr: {min: -0.1, max: 0.1}\n", "13: mutation.rl_hp_selection.lr.min: mutation could set lr to -0.1"),
    ("mutation-range-batch-size-0", GOOD + "mutation:\n  rl_hp_selection:\n    batch_size: {min: 0, max: 64}\n", "13: mutation.rl_hp_selection.batch_size.min: mutation could set batch_size to 0"),
    ("mutation-probability-huge", GOOD + "mutation:\n  probabilities:\n    arch_mut: 1.0e+308\n", "13: mutation.probabilities.arch_mut: input should be less than or equal to 1000000"),
    ("batch-above-replay-size", GOOD + "replay_buffer:\n  max_size: 32\n", "algorithm.batch_size: is larger than the replay buffer (max_size 32)"),
    ("checkpoint-path-nul", GOOD.replace("  max_steps: 20000\n", '  max_steps: 20000\n  checkpoint_path: "ck\\0pt"\n'), "9: training.checkpoint_path: must not contain control or format characters (found '\\x00')"),
    ("negative-time-limit", GOOD.replace("  num_envs: 8\n", "  num_envs: 8\n  config: {max_episode_steps: -5}\n"), "environment.config: max_episode_steps must be a positive integer or null, got -5"),
    ("env-name-escape", GOOD.replace("name: CartPole-v1", 'name: "Cart\\e[2JPole"'), "5: environment.name: must not contain control or format characters (found '\\x1b')"),
    ("mutation-min-above-max", GOOD + "mutation:\n  rl_hp_selection:\n    lr:\n      min: 0.1\n      max: 0.01\n", "15: mutation.rl_hp_selection.lr.max: must not be below min"),
    ("mutation-probability-negative", GOOD + "mutation:\n  probabilities:\n    no_mut: -0.5\n", "13: mutation.probabilities.no_mut: input should be greater than or equal to 0"),
    ("mutation-unknown-probability", GOOD + "mutation:\n  probabilities:\n    layer_mut: 0.1\n", "13: mutation.probabilities.layer_mut: unknown field"),
    ("tournament-size-one", GOOD + "tournament_selection:\n  tournament_size: 1\n", "12: tournament_selection.tournament_size: input should be greater than or equal to 2"),
    ("tournament-larger-than-pop", GOOD + "tournament_selection:\n  tournament_size: 5\n", "12: tournament_selection.tournament_size: must not exceed training.pop_size (4)"),
    ("selection-given-twice", GOOD + "tournament_selection: {tournament_size: 2}\nselection_strategy: {tournament_size: 2}\n", "12: selection_strategy: give the selection strategy once"),
    ("selection-bad-strategy", GOOD + "selection_strategy:\n  strategy: roulette\n", "12: selection_strategy.strategy: must be 'tournament' or 'multi_frequency'"),
    ("mfpbt-pop-too-small", GOOD + "selection_strategy:\n  strategy: multi_frequency\n", "11: selection_strategy: multi-frequency selection needs pop_size >= 6"),
    ("buffer-size-zero", GOOD + "replay_buffer:\n  max_size: 0\n", "12: replay_buffer.max_size: input should be greater than or equal to 1"),
    ("buffer-unknown-key", GOOD + "replay_buffer:\n  capacity: 10\n", "12: replay_buffer.capacity: unknown field"),
    ("buffer-n-step-conflict", GOOD + "replay_buffer:\n  n_step: 3\n  n_step_buffer_args: {n_step: 5}\n", "12: replay_buffer.n_step: conflicts with n_step_buffer_args.n_step"),
    ("duplicate-key", GOOD.replace("  lr: 1.0e-3", "  lr: 1.0e-3\n  lr: 2.0e-3"), "4: algorithm.lr: duplicate key"),
    ("invalid-yaml", GOOD.replace("num_envs: 8", "num_envs: [8"), "invalid YAML"),
    ("top-level-list", "- algorithm\n- environment\n", "1: input should be a valid dictionary"),
    ("empty-file", "", "1: the manifest is empty"),
    ("comment-only-file", "# nothing here\n", "1: the manifest is empty"),
]


def _first_issue(stderr: str, path: str) -> str:
    first = stderr.strip().splitlines()[0]
    assert first.startswith(path), first
    return first[len(path):].lstrip(":").lstrip()


@pytest.mark.parametrize(("case", "text", "expected"), BAD, ids=[case for case, _, _ in BAD])
def test_bad_manifest_reports_path_line_and_exits_2(tmp_path, capsys, case, text, expected):
    file = tmp_path / f"{case}.yaml"
    file.write_text(text)
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    reported = _first_issue(err, str(file))
    assert reported.startswith(expected) or expected in reported, err
    assert "Traceback" not in err


def test_at_least_25_distinct_bad_manifests():
    assert len({case for case, _, _ in BAD}) >= 25


def test_every_problem_is_reported_at_once(tmp_path, capsys):
    file = tmp_path / "many.yaml"
    file.write_text(GOOD.replace("lr: 1.0e-3", "lr: -1").replace("num_envs: 8", "num_envs: 0") + "  bogus: 1\n")
    assert main(["validate", str(file)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(": ")[1] for line in lines] == ["algorithm.lr", "environment.num_envs", "training.bogus"]
    assert [int(line.split(":")[1]) for line in lines] == [3, 6, 11]


def test_directory_and_missing_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "absent.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_binary_file_is_refused(tmp_path, capsys):
    file = tmp_path / "model.yaml"
    file.write_bytes(b"\x80\x04\x95\xff\x00binary")
    assert main(["validate", str(file)]) == 2
    assert "not a text file" in capsys.readouterr().err


def test_secrets_are_never_echoed(tmp_path, capsys):
    file = tmp_path / "secret.yaml"
    file.write_text(GOOD + "  wandb_api_key: sk-live-123456\n")
    assert main(["validate", str(file), "--json"]) == 2
    out = capsys.readouterr().out
    assert "sk-live-123456" not in out and "***" in out


def test_good_manifest_and_json_verdicts(tmp_path, capsys):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    bad.write_text(GOOD.replace("pop_size: 4", "pop_size: 0"))
    assert main(["validate", str(good)]) == 0
    assert "valid (DQN, off_policy)" in capsys.readouterr().out
    assert main(["validate", "--json", str(good), str(bad)]) == 2
    verdicts = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert verdicts[0] == {"file": str(good), "valid": True, "algorithm": "DQN", "paradigm": "off_policy",
                           "warnings": []}
    assert verdicts[1]["valid"] is False
    assert verdicts[1]["errors"][0] == {"path": "training.pop_size", "line": 9,
                                        "message": "input should be greater than or equal to 1", "got": "0"}


def test_json_manifest_files_are_accepted(tmp_path, capsys):
    file = tmp_path / "m.json"
    file.write_text(json.dumps({"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1", "num_envs": 0}}, indent=2))
    assert main(["validate", str(file)]) == 2
    assert f"{file}:7: environment.num_envs" in capsys.readouterr().err


def test_shipped_example_manifests_validate():
    from pathlib import Path

    files = sorted(str(p) for p in Path("configs/training").glob("*.yaml"))
    assert files, "no example manifests shipped"
    assert main(["validate", *files]) == 0


def test_usage_errors_exit_2(capsys):
    assert main([]) == 2
    assert main(["validate"]) == 2
    assert main(["no-such-command"]) == 2


def test_help_and_version(capsys):
    assert main(["--help"]) == 0
    assert "validate" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert "agile-core 0.1.0" in capsys.readouterr().out


def test_schema_lists_algorithms_and_aliases(tmp_path, capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    names = {d["properties"]["name"].get("const") for d in schema["$defs"].values() if "name" in d.get("properties", {})}
    assert {"DQN", "PPO", "TD3"} <= names
    assert "population_size" in schema["$defs"]["TrainingSpec"]["properties"]
    assert schema["additionalProperties"] is False
    out = tmp_path / "schema.json"
    assert main(["schema", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["title"] == "TrainingManifest"


def test_console_script_exit_code_and_help_speed():
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "agile_cli.main", "--help"], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    assert result.returncode == 0 and "validate" in result.stdout
    assert elapsed < 2.0  # generous for a loaded CI machine; measured ~0.1 s
    code = "import sys, agile_cli.main; agile_cli.main.build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_manifest_invalid_yaml_line_number(tmp_path, capsys):
    file = tmp_path / "broken.yaml"
    file.write_text(textwrap.dedent("""\
        algorithm:
          name: DQN
        environment:
          name: [CartPole
        """))
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{file}:5: invalid YAML") or err.startswith(f"{file}:4: invalid YAML"), err


def test_training_fields_a_paradigm_does_not_read_draw_one_warning_each() -> None:
    """PPO reads no epsilon schedule, warm-up or replay buffer; the LLM/bandit fields belong to
    paradigms that read them. Setting them is accepted (manifests move between paradigms and
    trainers) with one warning per field naming the paradigm, not silently ignored."""
    from agile_core.errors import ManifestWarning
    from agile_core.specs.manifest import TrainingManifest

    def notes(text: str) -> list[str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ManifestWarning)
            manifest = TrainingManifest.from_text(textwrap.dedent(text))
        return [issue.format() for issue in manifest.warnings]

    with pytest.warns(ManifestWarning, match=r"training.eps_start: is not used by the on-policy paradigm \(PPO\)"):
        manifest = TrainingManifest.from_text(textwrap.dedent("""
            algorithm: {name: PPO}
            environment: {name: CartPole-v1}
            training: {eps_start: 0.5, learning_delay: 100, max_steps: 1000}
            """))
    paths = [issue.path for issue in manifest.warnings]
    assert paths == [("training", "eps_start"), ("training", "learning_delay")]
    dqn = """
        algorithm: {name: DQN}
        environment: {name: CartPole-v1}
        training: {eps_start: 0.5, learning_delay: 100%s}
        """
    assert any("training.sum_scores: is not used by the off-policy paradigm (DQN)" in n for n in notes(dqn % ", sum_scores: false"))
    assert notes(dqn % "") == []  # the off-policy paradigm reads these
    assert notes("""
        algorithm: {name: PPO}
        environment: {name: CartPole-v1}
        training: {eps_start: null, sum_scores: true}
        """) == []  # defaults are harmless


def test_initial_value_outside_its_mutation_range_is_accepted_with_a_warning(tmp_path, capsys):
    file = tmp_path / "outside.yaml"
    file.write_text(GOOD + "mutation:\n  rl_hp_selection:\n    lr: {min: 0.1, max: 0.5}\n")
    assert main(["validate", str(file)]) == 0
    captured = capsys.readouterr()
    assert f"{file}:13: warning: mutation.rl_hp_selection.lr: the initial value algorithm.lr=0.001 lies outside" in captured.err
    assert "valid (DQN, off_policy), 1 warning" in captured.out


def test_a_warm_up_or_learn_step_past_the_budget_draws_a_warning() -> None:
    """Valid, but no agent would ever learn: said at validation, not discovered after the run."""
    from agile_core.errors import ManifestWarning
    from agile_core.specs.manifest import TrainingManifest

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        manifest = TrainingManifest.from_text(textwrap.dedent("""
            algorithm: {name: DQN, learn_step: 5000}
            environment: {name: CartPole-v1}
            training: {max_steps: 1000, evo_steps: 500, learning_delay: 1000}
            """))
    notes = {issue.path: issue.message for issue in manifest.warnings}
    assert "no agent would ever learn" in notes[("training", "learning_delay")]
    assert "no agent would ever learn" in notes[("algorithm", "learn_step")]
