"""Every `agile train` run ends with a resumable run checkpoint, with or without
--checkpoint-steps (the LLM side: tests/llm/test_manifest_runs.py); Python loops write one only
when asked."""

import json
from pathlib import Path

from agile_cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PPO = str(ROOT / "configs" / "training" / "ppo_cartpole.yaml")
TINY = ["--set", "training.evo_steps=1024", "--set", "algorithm.learn_step=256", "--set", "training.pop_size=2",
        "--quiet"]


def _checkpoints(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("checkpoint_*"))


def test_a_run_without_checkpoint_steps_ends_with_a_checkpoint_that_resumes(tmp_path):
    run = tmp_path / "run"
    assert main(["train", PPO, *TINY, "--set", "training.max_steps=2048", "--run-dir", str(run)]) == 0
    assert _checkpoints(run / "checkpoints") == ["checkpoint_000002048"]
    assert main(["train", PPO, *TINY, "--set", "training.max_steps=3072", "--run-dir", str(run),
                 "--resume-from-checkpoint", str(run)]) == 0
    assert _checkpoints(run / "checkpoints") == ["checkpoint_000002048", "checkpoint_000003072"]
    assert [a["steps"] for a in json.loads((run / "summary.json").read_text())["agents"]] == [3072, 3072]


def test_with_checkpoint_steps_the_last_one_is_the_run_end(tmp_path):
    run = tmp_path / "run"
    assert main(["train", PPO, *TINY, "--set", "training.max_steps=3072", "--checkpoint-steps", "2048",
                 "--overwrite-checkpoints", "--run-dir", str(run)]) == 0
    saved = json.loads((run / "checkpoints" / "latest" / "manifest.json").read_text())
    assert saved["metadata"]["loop"]["agent_steps"] == 3072


def test_python_loops_write_no_checkpoint_unless_asked(tmp_path, monkeypatch):
    from agile_core.specs.manifest import TrainingManifest
    from agile_core.trainer import LocalTrainer

    monkeypatch.chdir(tmp_path)
    data = TrainingManifest.get_validated(PPO).to_dict()
    data["training"].update(max_steps=512, evo_steps=512, pop_size=2, eval_loop=1)
    data["algorithm"]["learn_step"] = 256
    manifest = TrainingManifest.get_validated(data)
    LocalTrainer.from_manifest(manifest).train(verbose=False)
    assert not (tmp_path / "checkpoints").exists()
    LocalTrainer.from_manifest(manifest).train(verbose=False, final_checkpoint=True,
                                               checkpoint_path=str(tmp_path / "ckpt"))
    assert _checkpoints(tmp_path / "ckpt") == ["checkpoint_000000512"]


def test_the_interrupt_message_counts_steps_per_agent_and_the_total_apart(tmp_path):
    from agile_core.training.interrupt import TrainingInterrupted

    error = TrainingInterrupted(tmp_path / "checkpoint_000000500", 500, total_steps=1000)
    assert str(error).startswith("training interrupted at step 500 per agent (1,000 for the whole population)")
    assert "for the whole population" not in str(TrainingInterrupted(None, 7, total_steps=7))
