"""Damaged, edited or foreign checkpoints given to `agile train` and `agile evaluate`: each is
refused with one line naming the file and the field (exit 2), never a traceback, and the
checkpoint itself is left loadable; what can be loaded resumes into a usable run."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agile_cli.main import main
from agile_core.algorithms.persistence import agent_state, checked_hyperparameters
from agile_core.algorithms.saved_state import check_agent_fields
from agile_core.checkpoint import CheckpointError
from agile_core.training.checkpointing import resume_run

ROOT = Path(__file__).resolve().parents[2]
DQN = ROOT / "configs/training/dqn_cartpole.yaml"
TINY = ["--set", "training.evo_steps=128", "--set", "training.learning_delay=32", "--set", "training.pop_size=2",
        "--set", "training.eval_steps=20", "--set", "training.eval_loop=1", "--set", "algorithm.batch_size=16",
        "--quiet"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-member DQN run checkpoint at 256 steps per agent."""
    run_dir = tmp_path_factory.mktemp("source") / "run"
    assert main(["train", str(DQN), *TINY, "--set", "training.max_steps=256", "--checkpoint-steps", "256",
                 "--run-dir", str(run_dir)]) == 0
    (path,) = sorted((run_dir / "checkpoints").glob("checkpoint_*"))
    return path


def copy_with(checkpoint: Path, target: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of `checkpoint` at `target` whose manifest.json metadata `edit` changed in place."""
    shutil.copytree(checkpoint, target)
    manifest = json.loads((target / "manifest.json").read_text())
    edit(manifest["metadata"])
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def resume(checkpoint: Path, run_dir: Path, *extra: str) -> int:
    return main(["train", str(DQN), *TINY, "--set", "training.max_steps=384", "--run-dir", str(run_dir),
                 "--resume-from-checkpoint", str(checkpoint), *extra])


def set_all(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(metadata: dict[str, Any]) -> None:
        for agent in metadata["agents"]:
            agent[field] = value
    return edit


def set_hyperparameter(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(metadata: dict[str, Any]) -> None:
        metadata["agents"][1]["hyperparameters"][name] = value
    return edit


def narrow_encoder(metadata: dict[str, Any]) -> None:
    metadata["agents"][0]["network_configs"]["actor"]["encoder"]["hidden_size"] = [8]


@pytest.mark.parametrize(("edit", "expected"), [
    (set_all("fitness", ["high", "low"]), "agents[0]: fitness must be a list of numbers"),
    (set_all("steps", -5), "agents[0]: steps must be an integer in [0, 2**62)"),
    (set_hyperparameter("lr", -1.0), "agents[1]: hyperparameters.lr: input should be greater than 0"),
    (set_hyperparameter("batch_size", 0), "agents[1]: hyperparameters.batch_size: input should be greater than or equal to 1"),
    (set_hyperparameter("gamma", 2.0), "agents[1]: hyperparameters.gamma: input should be less than or equal to 1"),
    (set_hyperparameter("network_names", 1), "agents[1]: hyperparameters: DQN has no hyperparameter 'network_names'"),
    (narrow_encoder, "agents[0]: network 'actor': the saved weights do not fit the saved architecture: "
                     "encoder.layers.0.main.weight has shape"),
    (lambda m: m["loop"].update(agent_steps="many"), "loop: agent_steps must be an integer"),
], ids=["string-fitness", "negative-steps", "negative-lr", "zero-batch", "gamma-2", "foreign-attribute",
        "shape-mismatch", "loop-counter"])
def test_a_damaged_checkpoint_is_refused_naming_the_field_and_stays_intact(
        checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        edit: Callable[[dict[str, Any]], None], expected: str) -> None:
    damaged = copy_with(checkpoint, tmp_path / "damaged", edit)
    before = {p.name: p.read_bytes() for p in damaged.iterdir()}
    assert resume(damaged, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert f"agile train: cannot resume from checkpoint {damaged}: {expected}" in err, err
    assert "Traceback" not in err and "training failed" not in err
    assert {p.name: p.read_bytes() for p in damaged.iterdir()} == before
    assert len(resume_run(checkpoint).agents) == 2  # the original still loads


def test_resuming_at_or_past_max_steps_is_refused_with_the_numbers(checkpoint: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", str(DQN), *TINY, "--set", "training.max_steps=128", "--run-dir", str(tmp_path / "run"),
                 "--resume-from-checkpoint", str(checkpoint)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert ("cannot resume: the checkpoint is at 256 steps per agent, which already spends training.max_steps "
            "(128); raise max_steps to train further") in err


def test_a_warm_start_from_another_environment_is_refused_and_another_architecture_warns(
        checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lunar = main(["train", str(ROOT / "configs/training/dqn.yaml"), *TINY, "--set", "training.max_steps=128",
                  "--run-dir", str(tmp_path / "lunar"), "--load-weights-from", str(checkpoint)])
    err = capsys.readouterr().err
    assert lunar == 2, err
    assert (f"cannot load weights from checkpoint {checkpoint}: its agents do not fit this manifest: observation_space "
            "(environment): the checkpoint has Box(shape=(4,), float32), the manifest Box(shape=(8,), float32)") in err
    narrow = main(["train", str(DQN), *TINY, "--set", "training.max_steps=128", "--set",
                   "network.encoder_config.hidden_size=[16]", "--run-dir", str(tmp_path / "narrow"),
                   "--load-weights-from", str(checkpoint)])
    err = capsys.readouterr().err
    assert narrow == 0, err
    assert ("agile: warning: load_weights_from: the checkpoint's architecture of actor, actor_target differs from "
            "the manifest's network section; training starts from the checkpoint's") in err


def test_world_size_without_a_launcher_exits_2_with_advice(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK")}
    result = subprocess.run([sys.executable, "-m", "agile_cli.main", "train", str(DQN), *TINY, "--run-dir",
                             str(tmp_path / "run")], capture_output=True, text=True, timeout=120,
                            env={**env, "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 2, result.stderr
    assert "started as 2 processes (WORLD_SIZE=2), but the data-parallel group cannot start" in result.stderr
    assert "`accelerate launch` or `torchrun`" in result.stderr and "Traceback" not in result.stderr


def test_an_agent_with_a_nan_fitness_saves_and_loads(tmp_path: Path) -> None:
    from agile_offpolicy import DQN as DQNAgent

    env = gym.make("CartPole-v1")
    agent = DQNAgent(env.observation_space, env.action_space)
    agent.fitness, agent.scores = [math.nan, 3.0], [math.inf]
    agent.save_checkpoint(tmp_path / "agent")
    loaded = DQNAgent.load(tmp_path / "agent")
    assert math.isnan(loaded.fitness[0]) and loaded.fitness[1] == 3.0 and math.isnan(loaded.scores[0])


ENDLESS_ENV = '''
import gymnasium
import numpy as np


class Endless(gymnasium.Env):
    """An environment whose episodes never end."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}
'''


def test_evaluation_episodes_that_never_end_fail_naming_eval_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import agile_core.training.evaluation as evaluation

    monkeypatch.setattr(evaluation, "UNCAPPED_EPISODE_LIMIT", 500)
    (tmp_path / "endless.py").write_text(ENDLESS_ENV)
    manifest = tmp_path / "endless.yaml"
    manifest.write_text("algorithm: {name: DQN, batch_size: 16}\n"
                        "environment: {name: Endless, path: endless.py, entrypoint: Endless, num_envs: 1}\n"
                        "training: {max_steps: 64, evo_steps: 64, pop_size: 1, learning_delay: 16}\n")
    assert main(["train", str(manifest), "--quiet", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{manifest}: training.eval_steps: an evaluation episode ran 500 steps without terminating or " \
           "truncating and nothing caps it" in err, err


# ---------------------------------------------------------------------- property: random damage
_ADVERSARIAL = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                         st.text(max_size=5), st.lists(st.integers(-3, 3), max_size=3), st.just({}))


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [p for key, value in node.items() for p in _leaves(value, (*path, key))] or [path]
    if isinstance(node, list) and node:
        return [p for index, value in enumerate(node) for p in _leaves(value, (*path, index))]
    return [path]


def _set(root: Any, path: tuple[Any, ...], value: Any, delete: bool) -> None:
    for key in path[:-1]:
        root = root[key]
    if delete and isinstance(root, dict):
        del root[path[-1]]
    else:
        root[path[-1]] = value


@st.composite
def damage(draw: st.DrawFn) -> tuple[str, Any]:
    """One way to damage a checkpoint: a JSON leaf replaced or deleted, a tensor's declared shape or
    dtype changed, or a file truncated."""
    kind = draw(st.sampled_from(["json", "json", "json", "shape", "dtype", "truncate"]))
    if kind == "json":
        return kind, (draw(st.integers(0, 10**6)), draw(_ADVERSARIAL), draw(st.booleans()))
    if kind in ("shape", "dtype"):
        return kind, (draw(st.integers(0, 10**6)), draw(st.sampled_from(["float16", "int64", "bool", "uint8"])),
                      draw(st.lists(st.integers(0, 70), max_size=3)))
    return kind, (draw(st.sampled_from(["manifest.json", "agent_0.safetensors", "rng.safetensors",
                                        "buffer_replay.safetensors"])), draw(st.floats(0.0, 0.99)))


def _apply(target: Path, kind: str, args: Any) -> None:
    manifest = json.loads((target / "manifest.json").read_text())
    if kind == "json":
        index, value, delete = args
        leaves = _leaves(manifest["metadata"])
        _set(manifest["metadata"], leaves[index % len(leaves)], value, delete)
    elif kind in ("shape", "dtype"):
        index, dtype, shape = args
        nodes = [node for part in manifest["parts"].values() for node in _tensor_nodes(part["skeleton"])]
        node = nodes[index % len(nodes)]
        if kind == "dtype":
            node["dtype"] = dtype
        else:
            node["shape"] = shape
    else:
        name, share = args
        data = (target / name).read_bytes()
        (target / name).write_bytes(data[:int(len(data) * share)])
        return
    (target / "manifest.json").write_text(json.dumps(manifest))


def _tensor_nodes(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        own = [node] if node.get("t") in ("tensor", "ndarray") else []
        return own + [n for value in node.values() for n in _tensor_nodes(value)]
    if isinstance(node, list):
        return [n for value in node for n in _tensor_nodes(value)]
    return []


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=damage())
def test_random_damage_is_refused_or_resumes_into_a_usable_population(
        checkpoint: Path, tmp_path_factory: pytest.TempPathFactory, change: tuple[str, Any]) -> None:
    target = tmp_path_factory.mktemp("damaged") / "checkpoint"
    shutil.copytree(checkpoint, target)
    _apply(target, *change)
    try:
        run = resume_run(target)
    except CheckpointError as exc:
        event(f"{change[0]}: refused")
        assert str(target) in str(exc)
        return
    event(f"{change[0]}: loaded")
    obs = np.zeros((1, 4), dtype=np.float32)
    for agent in run.agents:  # what loads is what an agent could have saved, and it acts
        meta, _ = agent_state(agent)
        check_agent_fields(meta)
        checked_hyperparameters(agent, agent.hyperparameters())
        assert agent.get_action(obs).shape == (1,)


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["loop", "evolution"]), index=st.integers(0, 10**6), value=_ADVERSARIAL,
       delete=st.booleans())
def test_damaged_run_state_is_refused_or_resumed_by_agile_train(
        checkpoint: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
        path: str, index: int, value: Any, delete: bool) -> None:
    root = tmp_path_factory.mktemp("run-state")

    def edit(metadata: dict[str, Any]) -> None:
        leaves = _leaves(metadata[path])
        _set(metadata[path], leaves[index % len(leaves)], value, delete)

    damaged = copy_with(checkpoint, root / "checkpoint", edit)
    code = resume(damaged, root / "run")
    err = capsys.readouterr().err
    event(f"{path}: exit {code}")
    assert code in (0, 2), err
    assert "Traceback" not in err and "training failed" not in err
    if code == 2:
        assert str(damaged) in err or "cannot resume" in err
    else:  # resumed: the run ended at its budget with a checkpoint that loads
        assert json.loads((root / "run" / "summary.json").read_text())["agents"]


def test_evaluating_an_agent_whose_weights_disagree_with_its_architecture_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agile_offpolicy import DQN as DQNAgent

    env = gym.make("CartPole-v1")
    DQNAgent(env.observation_space, env.action_space).save_checkpoint(tmp_path / "elite")
    manifest = json.loads((tmp_path / "elite" / "manifest.json").read_text())
    manifest["metadata"]["network_configs"]["actor"]["encoder"]["hidden_size"] = [8]
    (tmp_path / "elite" / "manifest.json").write_text(json.dumps(manifest))
    assert main(["evaluate", str(tmp_path / "elite"), "--env", "CartPole-v1", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert f"agile evaluate: {tmp_path / 'elite'}: agent: network 'actor': the saved weights do not fit" in err, err
