"""Entry-point discovery of paradigms, with a toy paradigm installed as a distribution."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from agile_core import registry
from agile_core.errors import ManifestError
from agile_core.specs.manifest import TrainingManifest

TOY = Path(__file__).parent / "toy_paradigm"


@pytest.fixture
def toy_installed(tmp_path, monkeypatch):
    """Make the toy paradigm discoverable through a real dist-info entry point."""
    dist = tmp_path / "agile_toy-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: agile-toy\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[agile.paradigms]\ntoy = agile_toy.plugin:PARADIGM\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(TOY / "src"))
    importlib.invalidate_caches()
    registry.refresh()
    yield
    registry.refresh()
    for name in [m for m in sys.modules if m.startswith("agile_toy")]:
        del sys.modules[name]


def test_real_paradigms_are_discovered():
    names = registry.algorithm_names()
    assert {"DQN", "RainbowDQN", "DDPG", "TD3", "PPO", "RecurrentPPO"} <= set(names)
    assert registry.paradigm_of("DQN").name == "off_policy"
    assert registry.paradigm_of("PPO").name == "on_policy"


def test_toy_paradigm_is_discovered_through_entry_points(toy_installed):
    assert "ToyAlgo" in registry.algorithm_names()
    manifest = TrainingManifest.get_validated(
        {"algorithm": {"name": "ToyAlgo", "lr": 0.1}, "environment": {"name": "toy", "difficulty": 2}}
    )
    assert manifest.paradigm_name == "toy"
    assert type(manifest.environment).__name__ == "ToyEnvSpec"
    assert manifest.environment.difficulty == 2
    assert set(manifest.resolved_mutation().rl_hp_selection) == {"lr", "batch_size"}


def test_toy_env_section_is_validated_by_its_paradigm(toy_installed):
    with pytest.raises(ManifestError) as info:
        TrainingManifest.get_validated(
            {"algorithm": {"name": "ToyAlgo"}, "environment": {"name": "toy", "difficulty": 9, "sync": True}}
        )
    paths = [".".join(map(str, issue.path)) for issue in info.value.issues]
    assert paths == ["environment.difficulty", "environment.sync"]


def test_numeric_hyperparameters_exclude_bools(toy_installed):
    spec = registry.algorithm_spec("ToyAlgo")
    assert spec.numeric_hyperparameters() == {"lr": float, "batch_size": int}


def test_programmatic_registration_and_removal():
    from agile_core.specs.env import GymEnvSpec

    spec = registry.algorithm_spec("DQN")
    class CustomParadigm(registry.Paradigm):
        name = "custom"
        distribution = "x"
        algorithms = ()
        env_spec = GymEnvSpec

        def run_loop(self, manifest, env, population, options, device):
            raise NotImplementedError

    custom = CustomParadigm()
    registry.register_paradigm(custom)
    try:
        assert "custom" in registry.paradigms()
    finally:
        registry.unregister_paradigm("custom")
    assert "custom" not in registry.paradigms()
    assert spec.registered_name() == "DQN"


def test_unknown_algorithm_suggests_close_match_and_lists_installed():
    with pytest.raises(registry.UnknownAlgorithmError) as info:
        registry.algorithm_spec("dqn")
    message = str(info.value)
    assert "did you mean 'DQN'?" in message
    assert "DDPG, DPO, DQN, GRPO, IPPO, LLMPPO, LLMREINFORCE, MADDPG" in message


def test_known_algorithm_of_missing_package_names_the_package(monkeypatch):
    monkeypatch.setattr(registry, "_distribution_installed", lambda name: False)
    message = registry.unknown_algorithm_message("MADDPG")
    assert "agile-marl" in message and "pip install agile-marl" in message


def test_known_algorithm_of_an_installed_package_that_lacks_it_says_so(monkeypatch):
    monkeypatch.setattr(registry, "_distribution_installed", lambda name: True)
    message = registry.unknown_algorithm_message("MADDPG")
    assert "agile-marl" in message and "installed but does not provide it yet" in message
    assert "pip install" not in message


def test_core_does_not_import_paradigm_packages():
    code = (
        "import sys; from agile_core.specs.manifest import TrainingManifest;"
        "TrainingManifest.get_validated({'algorithm': {'name': 'DQN'}, 'environment': {'name': 'CartPole-v1'}});"
        "bad = [m for m in ('torch', 'agile_offpolicy.dqn', 'gymnasium') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
