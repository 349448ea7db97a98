"""LLM runs as a manifest user meets them: a run directory that evaluates and resumes without
--checkpoint-steps, one step unit (steps per member) everywhere, mutation settings LLMs cannot
apply, multi-turn environments from a manifest, reward functions checked by `agile validate`,
and no deprecation warnings from the libraries underneath."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agile_cli.main import main
from agile_llm.tiny import write_tiny

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "configs" / "training"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out like the repository's configs: ``llm/tiny`` and ``training/``, so the
    example manifests' ``../llm/tiny`` paths resolve."""
    root = tmp_path_factory.mktemp("project")
    write_tiny(root / "llm" / "tiny")
    (root / "training").mkdir()
    for name in ("sft_tiny.yaml", "grpo_tiny.yaml", "multiturn_tiny.yaml"):
        shutil.copy(EXAMPLES / name, root / "training" / name)
    return root


def _steps(*settings: str) -> list[str]:
    return [arg for setting in settings for arg in ("--set", setting)]


def _checkpoints(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").glob("checkpoint_*"))


def _metric_rows(run: Path) -> list[dict[str, str]]:
    with (run / "metrics.csv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# ---------------------------------------------------------------------- a run directory to evaluate and resume
def test_a_run_without_checkpoint_steps_evaluates_and_resumes(project: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    manifest, run = str(project / "training" / "sft_tiny.yaml"), project / "runs" / "sft"
    assert main(["train", manifest, "--run-dir", str(run), "--quiet",
                 *_steps("training.max_steps=4", "training.evo_steps=2")]) == 0
    assert _checkpoints(run) == ["checkpoint_000000004"]
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json"]) == 0  # as docs/paradigms/llm.md shows it
    result = json.loads(capsys.readouterr().out)
    assert [member["steps"] for member in result["members"]] == [4, 4]
    assert main(["train", manifest, "--run-dir", str(run), "--quiet", "--resume-from-checkpoint", str(run),
                 *_steps("training.max_steps=6", "training.evo_steps=2")]) == 0
    assert _checkpoints(run) == ["checkpoint_000000004",
                                                                       "checkpoint_000000006"]
    assert [a["steps"] for a in json.loads((run / "summary.json").read_text())["agents"]] == [6, 6]


def test_a_run_directory_without_a_checkpoint_says_so(project: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "old-run"
    run.mkdir()
    (run / "manifest.resolved.json").write_text(json.dumps({"algorithm": {"name": "SFT"}}), encoding="utf-8")
    capsys.readouterr()
    assert main(["evaluate", str(run)]) == 2
    err = capsys.readouterr().err
    assert "holds no run checkpoint" in err and "RUN_DIR/elite" in err and "no manifest.json" not in err


# ---------------------------------------------------------------------- one step unit
def test_progress_checkpoints_and_metrics_count_steps_per_member(project: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = project / "runs" / "units"
    capsys.readouterr()
    assert main(["train", str(project / "training" / "sft_tiny.yaml"), "--run-dir", str(run), "--checkpoint-steps",
                 "3", *_steps("training.max_steps=6", "training.evo_steps=3", "training.pop_size=2")]) == 0
    out = capsys.readouterr()
    progress = [line for line in out.err.splitlines() if line.startswith("SFT dataset ")]
    assert progress and "6/6 steps" in progress[-1], out.err  # max_steps per member, not 12 for two members
    assert _checkpoints(run) == ["checkpoint_000000003",
                                                                       "checkpoint_000000006"]
    rows = _metric_rows(run)
    assert {int(row["step"]) for row in rows} == {3, 6}
    assert [float(r["value"]) for r in rows if r["name"] == "perf/global_steps"] == [6.0, 12.0]  # the total, apart
    history = [json.loads(line) for line in (run / "metrics.history.jsonl").read_text().splitlines()]
    assert [line["step"] for line in history] == [3, 6]
    assert "12 steps of the whole population" in out.out


def test_ctrl_c_names_the_step_its_checkpoint_is_named_by(tmp_path: Path) -> None:
    from agile_core.training.interrupt import TrainingInterrupted
    from agile_llm import SFT, DatasetEnv, SharedBase, train_llm_dataset
    from agile_llm.tiny import number_rows
    from tests.llm.helpers import LORA, tiny

    model, tokenizer = tiny()
    base = SharedBase(model, tokenizer, LORA)
    env = DatasetEnv(number_rows(), tokenizer, "sft", prompt_template="{prompt} =", test_fraction=0.2)
    pop = [SFT(base, lr=1e-2, batch_size=4, max_length=32, index=i, seed=i) for i in range(2)]
    train_llm_dataset(pop, env, max_steps=2, evo_steps=1, verbose=False)  # imports done before the signal
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(TrainingInterrupted) as caught:
        train_llm_dataset(pop, env, max_steps=1_000_000, evo_steps=5, verbose=False,
                          checkpoint_path=str(tmp_path / "ckpt"))
    timer.cancel()
    error = caught.value
    assert error.checkpoint_path is not None
    assert error.step == int(error.checkpoint_path.name.rsplit("_", 1)[-1]) and error.step % 5 == 0
    assert error.total_steps == 2 * error.step
    assert f"interrupted at step {error.step:,} per agent ({2 * error.step:,} for the whole population)" in str(error)


# ---------------------------------------------------------------------- mutation settings LLMs cannot apply
def test_unusable_mutation_weights_resolve_to_zero_with_a_warning(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from agile_core.hpo.mutation import Mutations
    from agile_core.specs.manifest import TrainingManifest

    grpo = TrainingManifest.get_validated(EXAMPLES / "grpo_tiny.yaml")  # no_mut 0.5, rl_hp_mut 0.5, the rest default
    weights = grpo.resolved_mutation().probabilities.operator_weights()
    assert weights == {"no_mut": 0.5, "arch_mut": 0.0, "params_mut": 0.0, "act_mut": 0.0, "rl_hp_mut": 0.5}
    assert Mutations.from_spec(grpo.resolved_mutation()).probabilities.tolist() == [0.5, 0.0, 0.0, 0.0, 0.5]
    assert grpo.to_dict()["mutation"]["probabilities"]["arch_mut"] == 0.0  # manifest.resolved.json records 0
    assert grpo.warnings == []  # defaults the user never wrote are resolved silently
    lines = (EXAMPLES / "sft_tiny.yaml").read_text().replace(
        "    rl_hp_mut: 0.5\n", "    rl_hp_mut: 0.5\n    arch_mut: 0.3\n    params_mut: 0.1\n    new_layer: 0.5\n")
    manifest = tmp_path / "sft.yaml"
    manifest.write_text(lines.replace("../llm/tiny", str(ROOT / "configs" / "llm" / "tiny")), encoding="utf-8")
    capsys.readouterr()
    assert main(["validate", str(manifest)]) == 0  # a warning, never a refusal
    err = capsys.readouterr().err
    for field in ("arch_mut", "params_mut", "new_layer"):
        assert f"warning: mutation.probabilities.{field}: " in err, err
    assert "SFT cannot apply arch_mut (it mutates rl_hp_mut only); ignored, resolved to 0 (got 0.3)" in err


def test_python_mutations_with_operators_llms_cannot_apply_warn(project: Path) -> None:
    from agile_core.errors import RunWarning
    from agile_core.hpo.mutation import Mutations
    from agile_llm import SFT, DatasetEnv, train_llm_dataset
    from agile_llm.tiny import number_rows
    from tests.llm.helpers import LORA

    model = str(project / "llm" / "tiny" / "model")
    pop = [SFT(model, lora_config=LORA, lr=1e-2, batch_size=4, max_length=32, index=i, seed=i) for i in range(2)]
    env = DatasetEnv(number_rows(), pop[0].tokenizer, "sft", prompt_template="{prompt} =", test_fraction=0.2)
    with pytest.warns(RunWarning, match=r"cannot apply arch_mut, params_mut: .*probability 0\.50"):
        train_llm_dataset(pop, env, max_steps=1, evo_steps=1, verbose=False,
                          mutation=Mutations(no_mutation=0.25, architecture=0.25, parameters=0.25, rl_hp=0.25))


def test_the_history_shows_each_mutation_in_the_generation_it_produced(project: Path) -> None:
    """A mutated member that then wins the tournament is the next generation's elite: the history
    line of the generation it was evaluated in must still say what mutated it."""
    run = project / "runs" / "mutations"
    assert main(["train", str(project / "training" / "sft_tiny.yaml"), "--run-dir", str(run), "--quiet",
                 *_steps("training.max_steps=8", "training.evo_steps=1", "mutation.probabilities.no_mut=0")]) == 0
    history = [json.loads(line) for line in (run / "metrics.history.jsonl").read_text().splitlines()]
    events = [row for row in csv.DictReader((run / "metrics.events.csv").open(encoding="utf-8"))
              if row["name"] == "hpo/mutation"]
    assert len(events) == 7  # every evolution mutates its one non-elite clone (rl_hp_mut only)
    for event in events:
        agent, description = event["text"].split(": ", 1)
        line = next(h for h in history if h["step"] > int(event["step"]))
        evaluated = {f"agent_{a['id']}": a for a in line["agents"]}
        assert evaluated[agent]["mutation"] == description and evaluated[agent]["operator"] == "rl_hp_mut"
        assert description.startswith("lr ") and description != "None"


# ---------------------------------------------------------------------- multi-turn environments from a manifest
def test_the_multi_turn_example_trains_and_evaluates(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = project / "runs" / "multiturn"
    assert main(["train", str(project / "training" / "multiturn_tiny.yaml"), "--run-dir", str(run), "--quiet",
                 *_steps("training.max_steps=2", "training.evo_steps=1")]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert [a["steps"] for a in summary["agents"]] == [2, 2]
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [m["episodes"] for m in result["members"]] == [10, 10]  # environment.eval_episodes
    assert all(0.0 <= m["mean_reward"] <= 2.0 for m in result["members"])


def test_env_config_and_the_number_of_evaluation_episodes(project: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from agile_core.errors import ManifestError, ManifestWarning
    from agile_core.specs.manifest import TrainingManifest
    from agile_llm.run import make_rollout_env
    from agile_llm.tiny import NumberDialogueEnv

    def manifest(**environment: Any) -> TrainingManifest:
        data = TrainingManifest.get_validated(project / "training" / "multiturn_tiny.yaml").to_dict()
        data["environment"].update(environment)
        data["environment"] = {k: v for k, v in data["environment"].items() if v is not None}
        return TrainingManifest.get_validated(data)

    source = make_rollout_env(manifest(config={"turns": 3}).environment)
    env = source.make_text_env()
    assert isinstance(env, NumberDialogueEnv) and len(env.train_sequences[0]) == 3 and env.num_test == 200
    with pytest.raises(ManifestError, match=r"environment\.config: .*NumberDialogueEnv.*unexpected keyword"):
        make_rollout_env(manifest(config={"turns": 2, "words": 5}).environment)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(manifest(config={"rounds": 2}).to_dict()), encoding="utf-8")
    capsys.readouterr()
    assert main(["train", str(path), "--quiet", "--run-dir", str(tmp_path / "run")]) == 2
    assert "environment.config:" in capsys.readouterr().err
    with pytest.warns(ManifestWarning, match="environment.config: only used with entrypoint"):
        TrainingManifest.get_validated({
            "algorithm": {"name": "GRPO"}, "network": {"pretrained_model_name_or_path": "m"},
            "environment": {"dataset": "x.jsonl", "reward_file_path": "agile_llm.tiny",
                            "reward_fn_name": "digit_reward", "config": {"turns": 2}}})


def test_evaluation_episodes_come_from_the_setting_else_num_test_else_one() -> None:
    from agile_llm import GRPO, RolloutHarness
    from agile_llm.tiny import NumberDialogueEnv
    from tests.llm.helpers import LORA, tiny

    model, tokenizer = tiny()
    agent = GRPO(model, tokenizer=tokenizer, lora_config=LORA, max_new_tokens=2, max_length=32)

    class Plain(NumberDialogueEnv):  # an environment without num_test
        num_test = None  # type: ignore[assignment]

    def factory(env_class: type) -> Any:
        return lambda: RolloutHarness(env_class(turns=1), tokenizer, max_turns=1, max_model_len=32)

    assert len(agent.evaluate_episodes(factory(NumberDialogueEnv))) == 2  # num_test: 20% of 10 sequences
    assert len(agent.evaluate_episodes(factory(NumberDialogueEnv), 3)) == 3
    assert len(agent.evaluate_episodes(factory(Plain))) == 1


# ---------------------------------------------------------------------- validate checks the reward function
def test_validate_names_a_reward_function_the_file_or_module_lacks(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rewards.py").write_text("import math\n\ndef reward(completion, answer, prompt=''):\n"
                                         "    return 0.0\n", encoding="utf-8")
    text = (EXAMPLES / "grpo_tiny.yaml").read_text()

    def validate(reward_file: str, name: str) -> tuple[int, str]:
        path = tmp_path / "grpo.yaml"
        path.write_text(text.replace("reward_file_path: agile_llm.tiny", f"reward_file_path: {reward_file}")
                        .replace("reward_fn_name: digit_reward", f"reward_fn_name: {name}"), encoding="utf-8")
        capsys.readouterr()
        code = main(["validate", str(path)])
        return code, capsys.readouterr().err

    line = text.splitlines().index("  reward_fn_name: digit_reward") + 1
    code, err = validate("rewards.py", "score")
    assert code == 2
    assert f"grpo.yaml:{line}: environment.reward_fn_name: rewards.py has no function 'score' (got 'score')" in err
    code, err = validate("agile_llm.tiny", "digit_rewards")
    assert code == 2 and "environment.reward_fn_name: agile_llm.tiny has no function 'digit_rewards'" in err
    assert validate("rewards.py", "reward")[0] == 0
    assert validate("agile_llm.tiny", "digit_reward")[0] == 0
    assert validate("not_a_module_anywhere", "score")[0] == 0  # what cannot be found is left to training


def test_source_check_only_answers_no_when_it_is_certain(tmp_path: Path) -> None:
    from agile_llm.source_check import missing_attribute

    (tmp_path / "a.py").write_text("try:\n    from fast import score\nexcept ImportError:\n    def score(c, a):\n"
                                   "        return 0.0\nif True:\n    other = score\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("from somewhere import *\n", encoding="utf-8")
    (tmp_path / "c.py").write_text("def __getattr__(name):\n    return len\n", encoding="utf-8")
    (tmp_path / "d.py").write_text("globals()['score'] = len\n", encoding="utf-8")
    (tmp_path / "e.py").write_text("def broken(:\n", encoding="utf-8")
    assert not missing_attribute("a.py", "score", tmp_path) and not missing_attribute("a.py", "other", tmp_path)
    assert missing_attribute("a.py", "absent", tmp_path)
    assert not any(missing_attribute(f"{name}.py", "score", tmp_path) for name in "bcde")
    assert not missing_attribute("missing.py", "score", tmp_path)
    assert missing_attribute("agile_llm.tiny", "nothing_here") and not missing_attribute("agile_llm.tiny", "WORDS")


# ---------------------------------------------------------------------- no deprecation warnings underneath
def test_llm_commands_print_no_deprecation_warnings(project: Path, tmp_path: Path) -> None:
    """Every warning shown (`-W default`): the libraries under agile_llm (transformers, peft,
    torch) must not warn about deprecated calls agile makes."""
    manifest = str(project / "training" / "sft_tiny.yaml")

    def agile(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-W", "default", "-m", "agile_cli.main", *args], capture_output=True,
                              text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)

    for result in (agile("validate", manifest),
                   agile("train", manifest, "--run-dir", str(tmp_path / "run"), "--quiet", "--save-elite",
                         *_steps("training.max_steps=2", "training.evo_steps=1")),
                   agile("evaluate", str(tmp_path / "run" / "elite"))):
        assert result.returncode == 0, result.stderr
        assert not any(word in result.stderr for word in ("DeprecationWarning", "FutureWarning", "deprecated")), \
            result.stderr
