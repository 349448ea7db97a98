"""Evaluating saved LLM agents (`agile_llm.evaluation` and `agile evaluate`): the numbers are the
ones the training loops' own evaluation gives, and unusable input is a clean exit 2."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agile_cli.main import main
from agile_core.trainer import LocalTrainer
from agile_llm.algorithm import generate_greedy
from agile_llm.dpo import DPO
from agile_llm.evaluation import EvaluationError, evaluate_checkpoint
from agile_llm.run import make_env
from agile_llm.sft import SFT
from agile_llm.tiny import build_model, build_tokenizer, write_tiny
from tests.llm.helpers import LORA

ROOT = Path(__file__).resolve().parents[2]
ROLLOUT = ("GRPO", "LLMPPO", "LLMREINFORCE")
REWARD = '''
def length_reward(completion, answer, prompt=""):
    """Graded in 0..1 by the length of the completion, so untrained members score apart."""
    return min(1.0, len(completion.strip()) / 8)
'''


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = write_tiny(tmp_path_factory.mktemp("tiny"))
    (folder / "length_reward.py").write_text(REWARD, encoding="utf-8")
    return folder


def _manifest(tiny_dir: Path, algorithm: str, **training: Any) -> dict[str, Any]:
    """A manifest with absolute paths (so the run's manifest.resolved.json works anywhere)."""
    environment: dict[str, Any] = {"prompt_template": "{prompt} =", "test_fraction": 0.2}
    algo: dict[str, Any] = {"name": algorithm, "lr": 1e-2, "batch_size": 16, "max_length": 32}
    if algorithm in ROLLOUT:
        environment.update(dataset=str(tiny_dir / "rollout.jsonl"), reward_file_path=str(tiny_dir / "length_reward.py"),
                           reward_fn_name="length_reward", max_reward=1.0)
        algo.update(batch_size=2, group_size=4, max_new_tokens=4, beta=0.0)
    else:
        environment["dataset"] = str(tiny_dir / f"{algorithm.lower()}.jsonl")
    if algorithm == "DPO":
        algo.update(lr=5e-3, beta=0.1, nll_alpha=1.0)
    return {"algorithm": algo, "environment": environment,
            "network": {"pretrained_model_name_or_path": str(tiny_dir / "model"), "lora_config": LORA},
            "training": {"max_steps": 4, "evo_steps": 2, "pop_size": 2, "seed": 0, **training}}


def _write(path: Path, manifest: dict[str, Any]) -> Path:
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return path


def _train(manifest: dict[str, Any], tmp: Path) -> tuple[list[Any], list[float]]:
    from agile_core.specs.manifest import validate_source
    from agile_core.yaml_source import read_manifest_file

    spec = validate_source(read_manifest_file(_write(tmp / "manifest.json", manifest)))
    return LocalTrainer.from_manifest(spec).train(verbose=False, save_elite=True, elite_path=str(tmp / "elite"),
                                                  checkpoint_steps=2, checkpoint_path=str(tmp / "checkpoints"))


# ---------------------------------------------------------------------- the numbers
@pytest.mark.parametrize("algorithm", ["SFT", "DPO", *ROLLOUT])
def test_elite_and_run_checkpoint_give_the_loops_fitness(tiny_dir: Path, tmp_path: Path, algorithm: str) -> None:
    manifest = _manifest(tiny_dir, algorithm)
    pop, fitnesses = _train(manifest, tmp_path)
    elite = evaluate_checkpoint(tmp_path / "elite", tmp_path / "manifest.json")
    assert elite["algorithm"] == algorithm and elite["split"] == "test"
    assert elite["fitness"] == pytest.approx(max(fitnesses), abs=1e-6)
    assert elite["base_model"] == str((tiny_dir / "model").resolve())
    run = evaluate_checkpoint(tmp_path / "checkpoints", manifest)  # the folder: its latest checkpoint
    assert [m["slot"] for m in run["members"]] == [0, 1]
    for member, agent in zip(run["members"], pop, strict=True):
        assert member["agent_id"] == agent.index and member["steps"] == agent.steps == 4
        assert member["fitness"] == pytest.approx(agent.fitness[-1], abs=1e-6)
    assert run["best_member"] == int(np.argmax([m["fitness"] for m in run["members"]]))
    one = evaluate_checkpoint(tmp_path / "checkpoints", manifest, member=1)
    assert one["fitness"] == pytest.approx(pop[1].fitness[-1], abs=1e-6) and one["slot"] == 1
    if algorithm == "SFT":
        assert elite["loss"] == pytest.approx(-elite["fitness"]) and elite["examples"] == 20
    if algorithm == "DPO":
        assert elite["accuracy"] == elite["fitness"] and elite["pairs"] == 20 and elite["loss"] > 0
    if algorithm in ROLLOUT:
        rewards = [m["mean_reward"] for m in run["members"]]
        assert 0 < max(rewards) <= 1 and elite["episodes"] == 20 and elite["std_reward"] >= 0
        assert 0 <= elite["accuracy"] <= 1
        few = evaluate_checkpoint(tmp_path / "elite", manifest, episodes=5)
        assert few["episodes"] == 5


def test_untrained_dpo_agent_scores_log2_and_a_coin_flip(tiny_dir: Path, tmp_path: Path) -> None:
    """A fresh adapter is the reference (LoRA B = 0): every margin is 0, so the DPO loss is
    log 2 and the preference accuracy 1/2 (ties count one half)."""
    DPO(str(tiny_dir / "model"), lora_config=LORA, max_length=32).save_checkpoint(tmp_path / "agent")
    result = evaluate_checkpoint(tmp_path / "agent", _manifest(tiny_dir, "DPO"))
    assert result["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert result["accuracy"] == 0.5 and result["margin"] == pytest.approx(0.0, abs=1e-6)


def test_sft_loss_and_greedy_match_agree_with_a_direct_computation(tiny_dir: Path, tmp_path: Path) -> None:
    manifest = _manifest(tiny_dir, "SFT", max_steps=150, evo_steps=150, pop_size=1)
    pop, _ = _train(manifest, tmp_path)
    agent = pop[0]
    from agile_core.specs.manifest import TrainingManifest

    env = make_env(TrainingManifest.get_validated(manifest).environment).bind(agent.tokenizer, "sft", 32)
    prompts = [env.encode_prompt(env.prompt_text(row)) for row in env.test_rows]
    completions = generate_greedy(agent, prompts, max_new_tokens=6)
    expected = np.mean([c.strip() == row["response"] for c, row in zip(completions, env.test_rows, strict=True)])
    result = evaluate_checkpoint(tmp_path / "elite", manifest)
    print(f"SFT after 150 steps: test loss {result['loss']:.3f}, greedy match {result['accuracy']:.2f}")
    assert result["loss"] == pytest.approx(agent.evaluate_loss(env), abs=1e-6)
    assert result["accuracy"] == pytest.approx(expected) and result["accuracy"] > 0  # 0.60 with seed 0


# ---------------------------------------------------------------------- the command
def test_agile_train_then_evaluate_reads_the_run_directory(tiny_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _write(tmp_path / "grpo.json", _manifest(tiny_dir, "GRPO"))
    run = tmp_path / "run"
    assert main(["train", str(manifest), "--run-dir", str(run), "--save-elite", "--checkpoint-steps", "2",
                 "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    capsys.readouterr()
    assert main(["evaluate", str(run / "elite"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["manifest"] == str(run / "manifest.resolved.json")
    assert result["mean_reward"] == pytest.approx(max(a["fitness"] for a in summary["agents"]), abs=1e-6)
    assert main(["evaluate", str(run)]) == 0  # the run directory: every member of its latest checkpoint
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("slot 0: GRPO agent") and "mean reward" in lines[0] and "held-out episodes" in lines[0]
    assert lines[-1].startswith("best: slot")


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("agile evaluate: ")
    return err


def test_unusable_input_is_a_clean_exit_2(tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_dir / "model", model_dir)
    SFT(str(model_dir), lora_config=LORA, max_length=32).save_checkpoint(tmp_path / "sft")
    sft = _manifest(tiny_dir, "SFT")
    manifest = _write(tmp_path / "sft.json", sft)
    agent = str(tmp_path / "sft")
    assert "no manifest" in _error(["evaluate", agent], capsys)
    assert "--env does not apply" in _error(["evaluate", agent, "--manifest", str(manifest), "--env", "x"], capsys)
    assert "evaluated on the whole test split" in _error(["evaluate", agent, "--manifest", str(manifest),
                                                     "--episodes", "3"], capsys)
    dqn = _error(["evaluate", agent, "--manifest", str(ROOT / "configs" / "training" / "dqn_cartpole.yaml")], capsys)
    assert "not an LLM algorithm" in dqn
    grpo = _error(["evaluate", agent, "--manifest", str(_write(tmp_path / "g.json", _manifest(tiny_dir, "GRPO")))],
                  capsys)
    assert "holds a SFT agent (llm_dataset)" in grpo and "GRPO (llm_rollout)" in grpo
    missing = dict(sft, environment={**sft["environment"], "dataset": str(tmp_path / "gone.jsonl")})
    assert "dataset file not found" in _error(["evaluate", agent, "--manifest",
                                               str(_write(tmp_path / "m.json", missing))], capsys)
    (tmp_path / "one.jsonl").write_text('{"prompt": "one", "response": "1"}\n', encoding="utf-8")
    single = dict(sft, environment={**sft["environment"], "dataset": str(tmp_path / "one.jsonl")})
    assert "train/test split needs at least 2" in _error(["evaluate", agent, "--manifest",
                                                          str(_write(tmp_path / "s.json", single))], capsys)
    # The base model moved away; the manifest's model is another one (other weights): refused.
    tokenizer = build_tokenizer()
    build_model(tokenizer, seed=7).save_pretrained(tmp_path / "other")
    tokenizer.save_pretrained(tmp_path / "other")
    shutil.move(model_dir, tmp_path / "moved")
    other = dict(sft, network={**sft["network"], "pretrained_model_name_or_path": str(tmp_path / "other")})
    hashed = _error(["evaluate", agent, "--manifest", str(_write(tmp_path / "o.json", other))], capsys)
    assert "cannot load" in hashed and "content hash" in hashed
    nowhere = dict(sft, network={**sft["network"], "pretrained_model_name_or_path": str(tmp_path / "nowhere")})
    assert "cannot load" in _error(["evaluate", agent, "--manifest", str(_write(tmp_path / "n.json", nowhere))],
                                   capsys)
    # A manifest pointing at the moved model (or at any copy with the same weights) finds it.
    assert main(["evaluate", agent, "--manifest", str(manifest)]) == 0
    moved = dict(sft, network={**sft["network"], "pretrained_model_name_or_path": str(tmp_path / "moved")})
    with pytest.raises(EvaluationError, match="member applies to run checkpoints"):
        evaluate_checkpoint(agent, moved, member=0)
    assert evaluate_checkpoint(agent, moved)["examples"] == 20


def test_rl_agents_still_need_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gymnasium as gym

    from agile_offpolicy import DQN

    env = gym.make("CartPole-v1")
    DQN(env.observation_space, env.action_space, seed=0).save_checkpoint(tmp_path / "dqn")
    assert "--env ID is required for RL agents" in _error(["evaluate", str(tmp_path / "dqn")], capsys)
    assert "--manifest applies to LLM checkpoints" in _error(
        ["evaluate", str(tmp_path / "dqn"), "--env", "CartPole-v1", "--manifest", "m.yaml"], capsys)
    assert "does not exist" in _error(["evaluate", str(tmp_path / "nothing"), "--env", "CartPole-v1"], capsys)
    assert main(["evaluate", str(tmp_path / "dqn"), "--env", "CartPole-v1", "--episodes", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2


def test_relative_paths_of_a_run_manifest_need_the_original(tiny_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """manifest.resolved.json keeps the manifest's relative paths: from the run directory they
    point nowhere, and the message says to pass the original manifest."""
    (tmp_path / "configs").mkdir()
    shutil.copy(tiny_dir / "sft.jsonl", tmp_path / "sft.jsonl")
    original = _manifest(tiny_dir, "SFT")
    original["environment"]["dataset"] = "../sft.jsonl"
    _write(tmp_path / "configs" / "sft.json", original)
    run = tmp_path / "runs" / "sft"
    run.mkdir(parents=True)
    _write(run / "manifest.resolved.json", original)
    SFT(str(tiny_dir / "model"), lora_config=LORA, max_length=32).save_checkpoint(run / "elite")
    err = _error(["evaluate", str(run / "elite")], capsys)
    assert "dataset file not found" in err and "give that manifest with --manifest" in err
    assert main(["evaluate", str(run / "elite"), "--manifest", str(tmp_path / "configs" / "sft.json")]) == 0
    assert "SFT agent 0: test loss" in capsys.readouterr().out


def test_a_failing_reward_function_is_exit_1_without_traceback(tiny_dir: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from agile_llm.grpo import GRPO

    (tmp_path / "broken.py").write_text("def reward(completion, answer, prompt=''):\n    raise KeyError('no score')\n",
                                        encoding="utf-8")
    manifest = _manifest(tiny_dir, "GRPO")
    manifest["environment"].update(reward_file_path=str(tmp_path / "broken.py"), reward_fn_name="reward")
    GRPO(str(tiny_dir / "model"), lora_config=LORA, max_length=32, max_new_tokens=2).save_checkpoint(tmp_path / "a")
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "a"), "--manifest", str(_write(tmp_path / "m.json", manifest))]) == 1
    err = capsys.readouterr().err
    assert "evaluation failed: KeyError: 'no score'" in err and "Traceback" not in err


def test_a_reward_function_name_the_file_lacks_names_reward_fn_name(tiny_dir: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rewards.py").write_text("def reward(completion, answer, prompt=''):\n    return 0.0\n",
                                         encoding="utf-8")
    manifest = _manifest(tiny_dir, "GRPO")
    manifest["environment"].update(reward_file_path=str(tmp_path / "rewards.py"), reward_fn_name="score")
    path = _write(tmp_path / "m.json", manifest)
    assert main(["train", str(path), "--quiet", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"environment.reward_fn_name: {tmp_path / 'rewards.py'} has no function 'score'" in err, err
