"""Which environments the install provides: LunarLander (Box2D) in the default install, Atari,
MuJoCo and PettingZoo butterfly as extras declared on the members and the meta-package and
resolved in the lock; a missing extra's error names the exact install command (never swig).

Missing packages are simulated: ``sys.modules[name] = None`` makes ``import name`` fail, and the
modules that imported it already are dropped so they are imported again."""

import sys
import tomllib
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agile_core.environments import EnvironmentBuildError, make_vector_env
from agile_core.environments.extras import ENV_EXTRAS, install_hint
from agile_core.specs.env import GymEnvSpec

ROOT = Path(__file__).resolve().parents[2]
ATARI_COMMAND = 'pip install "agile-rl-suite[atari]" (in the agile workspace: uv sync --extra atari)'


def _without(monkeypatch, module: str, *importers: str) -> None:
    """Make `module` unimportable and forget the modules under `importers` that imported it."""
    monkeypatch.setitem(sys.modules, module, None)
    for name in [n for n in sys.modules if n.startswith(importers)] if importers else []:
        monkeypatch.delitem(sys.modules, name)


def _without_ale(monkeypatch) -> None:
    _without(monkeypatch, "ale_py")
    for env_id in [env_id for env_id, spec in gym.registry.items() if spec.namespace == "ALE"]:
        monkeypatch.delitem(gym.registry, env_id)


# ---------------------------------------------------------------------------- default install


@pytest.mark.parametrize("env_id", ["LunarLander-v3", "LunarLanderContinuous-v3"])
def test_lunar_lander_is_in_the_default_install(env_id):
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (8,) and np.isfinite(obs).all()
    obs, reward, *_ = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs) and np.isfinite(reward)
    env.close()


def test_lunar_lander_builds_from_a_manifest_spec():
    env = make_vector_env(GymEnvSpec(name="LunarLander-v3", num_envs=2), seed=0)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 8)
    env.close()


# ---------------------------------------------------------------------------- missing extras


def test_missing_atari_extra_names_the_install_command(monkeypatch):
    _without_ale(monkeypatch)
    with pytest.raises(EnvironmentBuildError) as raised:
        make_vector_env(GymEnvSpec(name="ALE/Breakout-v5", num_envs=1))
    assert str(raised.value) == ("environment.name: 'ALE/Breakout-v5' needs ale-py, which is not installed "
                                 f"(Atari environments): {ATARI_COMMAND}")
    assert "swig" not in str(raised.value)


def test_missing_mujoco_extra_names_the_install_command(monkeypatch):
    _without(monkeypatch, "mujoco", "gymnasium.envs.mujoco")
    with pytest.raises(EnvironmentBuildError, match="HalfCheetah-v5") as raised:
        make_vector_env(GymEnvSpec(name="HalfCheetah-v5", num_envs=1))
    message = str(raised.value)
    assert 'pip install "agile-rl-suite[mujoco]"' in message and "uv sync --extra mujoco" in message


def test_missing_box2d_says_nothing_about_swig(monkeypatch):
    _without(monkeypatch, "Box2D", "gymnasium.envs.box2d")
    with pytest.raises(EnvironmentBuildError) as raised:
        make_vector_env(GymEnvSpec(name="LunarLander-v3", num_envs=1))
    message = str(raised.value)
    assert message.startswith("environment.name: 'LunarLander-v3' needs box2d, which is not installed")
    assert 'pip install "gymnasium[box2d]"' in message and "swig" not in message


def test_missing_butterfly_extra_names_the_install_command(monkeypatch):
    from agile_marl.envs import make_env_factory
    from agile_marl.specs.env import MultiAgentEnvSpec

    _without(monkeypatch, "pymunk", "pettingzoo.butterfly.pistonball")
    spec = MultiAgentEnvSpec(name="pettingzoo.butterfly.pistonball_v6")
    with pytest.raises(EnvironmentBuildError) as raised:
        make_env_factory(spec)
    assert str(raised.value) == (
        "environment.name: 'pettingzoo.butterfly.pistonball_v6' needs pymunk, which is not installed "
        "(PettingZoo butterfly environments): pip install \"agile-rl-suite[butterfly]\" "
        "(in the agile workspace: uv sync --extra butterfly)")


def test_a_wrapper_missing_opencv_names_the_atari_extra(monkeypatch):
    _without(monkeypatch, "cv2")
    spec = GymEnvSpec(name="CartPole-v1", num_envs=1, sync=True, wrappers=["gymnasium.wrappers.AtariPreprocessing"])
    with pytest.raises(EnvironmentBuildError) as raised:
        make_vector_env(spec)
    message = str(raised.value)
    assert message.startswith("environment.wrappers[0]: gymnasium.wrappers.AtariPreprocessing needs "
                              "opencv-python-headless, which is not installed")
    assert ATARI_COMMAND in message


def test_agile_train_prints_the_install_command(monkeypatch, tmp_path, capsys):
    from agile_cli.main import main

    _without_ale(monkeypatch)
    manifest = tmp_path / "breakout.yaml"
    manifest.write_text("algorithm: {name: PPO}\nenvironment: {name: ALE/Breakout-v5, num_envs: 1}\n"
                        "training: {max_steps: 64, evo_steps: 32, pop_size: 1}\n")
    assert main(["train", str(manifest), "--run-dir", str(tmp_path / "run"), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert ATARI_COMMAND in err and "swig" not in err and "Traceback" not in err


def test_a_missing_module_suggests_its_current_version():
    from agile_core.environments.loading import import_module

    with pytest.raises(EnvironmentBuildError, match=r"did you mean 'pettingzoo\.butterfly\.cooperative_pong_v6'\?"):
        import_module("pettingzoo.butterfly.cooperative_pong_v5", "name")


def test_every_hint_names_an_install_command_without_swig():
    for module, hint in ENV_EXTRAS.items():
        assert install_hint(f"{module}.sub") is hint
        assert hint.install_command().startswith("pip install ") and "swig" not in hint.message("x")
    assert install_hint("numpy") is None and install_hint(None) is None


# ---------------------------------------------------------------------------- declared and locked


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def test_extras_are_declared_on_the_members_and_the_meta_package():
    meta = _project(ROOT / "pyproject.toml")["optional-dependencies"]
    assert meta["atari"] == ["agile-offpolicy[atari]", "agile-onpolicy[atari]"]
    assert meta["mujoco"] == ["agile-offpolicy[mujoco]", "agile-onpolicy[mujoco]"]
    assert meta["butterfly"] == ["agile-marl[butterfly]"]
    assert meta["box2d"] == ["agile-offpolicy[box2d]"]  # kept: an alias of the default install
    for member in ("agile-offpolicy", "agile-onpolicy"):
        project = _project(ROOT / "packages" / member / "pyproject.toml")
        assert any(dep.startswith("gymnasium[box2d]") for dep in project["dependencies"])
        assert {"box2d", "atari", "mujoco"} <= set(project["optional-dependencies"])
    assert "butterfly" in _project(ROOT / "packages" / "agile-marl" / "pyproject.toml")["optional-dependencies"]
    for member in ("agile-core", "agile-llm", "agile-offline", "agile-cli", "agile-arena", "agile-marl"):
        dependencies = " ".join(_project(ROOT / "packages" / member / "pyproject.toml")["dependencies"])
        assert "box2d" not in dependencies and "ale-py" not in dependencies and "mujoco" not in dependencies


def test_the_lock_resolves_the_extras():
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    packages = {package["name"]: package for package in lock["package"]}
    assert {"box2d", "ale-py", "mujoco", "pymunk"} <= set(packages)
    offpolicy = packages["agile-offpolicy"]
    assert {"atari", "mujoco", "box2d"} <= set(offpolicy["optional-dependencies"])
    assert any(dep["name"] == "gymnasium" and "box2d" in dep.get("extra", []) for dep in offpolicy["dependencies"])
    assert "butterfly" in packages["agile-marl"]["optional-dependencies"]
    assert {"atari", "mujoco", "butterfly", "box2d"} <= set(packages["agile-rl-suite"]["optional-dependencies"])
