"""Non-finite numbers from the outside world: an environment that returns NaN rewards still ends
with a summary.json that is strict JSON (the fitness is null) and an elite chosen among the agents
whose fitness is a number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agile_cli.main import main

NAN_ENV = '''
import math
import gymnasium


class NanRewardCartPole(gymnasium.Wrapper):
    """CartPole whose rewards are NaN."""

    def __init__(self, **kwargs):
        super().__init__(gymnasium.make("CartPole-v1"))

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, math.nan, terminated, truncated, info
'''

MANIFEST = """\
algorithm: {name: DQN, batch_size: 32, learn_step: 4}
environment: {name: NanCartPole, path: nan_env.py, entrypoint: NanRewardCartPole, num_envs: 2}
training: {max_steps: 256, evo_steps: 128, pop_size: 2, eval_steps: 50, learning_delay: 64, seed: 0}
network: {latent_dim: 16, encoder_config: {hidden_size: [16]}, head_config: {hidden_size: [16]}}
"""


def test_nan_rewards_leave_a_strict_json_summary(tmp_path: Path) -> None:
    """No learning (the warm-up outlasts the budget): the weights stay finite, the fitness is NaN."""
    (tmp_path / "nan_env.py").write_text(NAN_ENV)
    manifest = tmp_path / "nan.yaml"
    manifest.write_text(MANIFEST.replace("learning_delay: 64", "learning_delay: 1000"))
    run_dir = tmp_path / "run"
    assert main(["train", str(manifest), "--quiet", "--run-dir", str(run_dir)]) == 0
    text = (run_dir / "summary.json").read_text()
    assert "NaN" not in text
    summary = json.loads(text)
    assert [agent["fitness"] for agent in summary["agents"]] == [None, None]
    assert summary["target_reached"] is False


def test_learning_from_nan_rewards_fails_as_diverged_naming_the_environment(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nan_env.py").write_text(NAN_ENV)
    manifest = tmp_path / "nan.yaml"
    manifest.write_text(MANIFEST)
    assert main(["train", str(manifest), "--quiet", "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "TrainingDiverged: every member's weights became NaN or infinite" in err
    assert "check the environment's rewards and observations for NaN" in err and "Traceback" not in err
