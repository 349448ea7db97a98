"""ArenaTrainer: the seeds' constructor and `train(...)`, the validated manifest serialised and
submitted, MF-PBT and what one server node cannot do refused with reasons."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import httpx
import pytest

from agile_arena import ArenaClient, ArenaTrainer
from agile_core.errors import ManifestError
from agile_core.specs.manifest import TrainingManifest
from agile_core.specs.selection import MultiFrequencySelectionSpec, TournamentSelectionSpec
from agile_core.specs.training import TrainingSpec
from agile_core.trainer import Trainer, TrainerConfigError

ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "configs" / "training" / "ppo_cartpole.yaml"
KEY = "arena_" + "t" * 43
EXPERIMENT = {"id": "exp7", "name": "cartpole", "project": "demo", "resource_id": "local", "status": "queued",
              "created_at": "2026-01-01T00:00:00Z", "started_at": None, "finished_at": None, "exit_code": None,
              "algorithm": "PPO", "environment": "CartPole-v1", "error": None}


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path, monkeypatch):
    for name in ("AGILE_ARENA_API_KEY", "ARENA_API_KEY", "AGILE_ARENA_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGILE_ARENA_CONFIG", str(tmp_path / "arena.json"))


@pytest.fixture
def server() -> tuple[ArenaClient, list[httpx.Request]]:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(201, json=EXPERIMENT)

    client = ArenaClient(api_key=KEY, url="http://127.0.0.1:8470", transport=httpx.MockTransport(handler))
    return client, requests


def test_arena_trainer_is_a_trainer():
    assert issubclass(ArenaTrainer, Trainer)


def test_from_manifest_submits_the_validated_manifest_serialised(server):
    client, requests = server
    trainer = ArenaTrainer.from_manifest(PPO, client=client)
    result = trainer.train(resource_id="local", num_nodes=1, project="demo", experiment_name="cartpole")
    assert result == EXPERIMENT
    body = json.loads(requests[0].content)
    assert body["resource_id"] == "local" and body["project"] == "demo" and body["experiment_name"] == "cartpole"
    assert body["manifest"] == TrainingManifest.get_validated(PPO).to_json()
    sent = TrainingManifest.from_text(body["manifest"], body["filename"])  # the server can validate it again
    assert sent.algorithm.name == "PPO" and sent.training.pop_size == 4
    assert requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_the_constructor_builds_the_manifest_from_specs(server):
    client, requests = server
    trainer = ArenaTrainer("PPO", "CartPole-v1", TrainingSpec(max_steps=2048, pop_size=2), client=client,
                           selection_strategy=TournamentSelectionSpec(tournament_size=2))
    trainer.train(resource_id=3)
    body = json.loads(requests[0].content)
    manifest = json.loads(body["manifest"])
    assert manifest["algorithm"]["name"] == "PPO" and manifest["environment"]["name"] == "CartPole-v1"
    assert manifest["training"]["max_steps"] == 2048 and body["resource_id"] == "3"


def test_a_client_is_made_from_the_api_key(monkeypatch):
    trainer = ArenaTrainer("PPO", "CartPole-v1", api_key=KEY)
    assert isinstance(trainer.client, ArenaClient) and trainer.client.has_api_key
    assert KEY not in repr(trainer.client)


def test_client_and_api_key_together_are_refused(server):
    client, _ = server
    with pytest.raises(TrainerConfigError, match="not both"):
        ArenaTrainer("PPO", "CartPole-v1", client=client, api_key=KEY)


def test_mf_pbt_is_rejected_with_the_reason(server):
    client, _ = server
    with pytest.raises(TrainerConfigError, match="Arena runs tournament selection only"):
        ArenaTrainer("PPO", "CartPole-v1", TrainingSpec(pop_size=6), client=client,
                     selection_strategy=MultiFrequencySelectionSpec())


def test_mf_pbt_manifests_are_rejected_too(server, tmp_path):
    client, _ = server
    manifest = tmp_path / "mf.yaml"
    manifest.write_text("algorithm: {name: PPO}\nenvironment: {name: CartPole-v1}\ntraining: {pop_size: 6}\n"
                        "selection_strategy: {strategy: multi_frequency}\n")
    with pytest.raises(TrainerConfigError, match="tournament selection only"):
        ArenaTrainer.from_manifest(manifest, client=client)


def test_the_deprecated_tournament_alias_still_works(server):
    client, requests = server
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = ArenaTrainer("PPO", "CartPole-v1", TrainingSpec(pop_size=2), client=client,
                               tournament=TournamentSelectionSpec(tournament_size=2))
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    trainer.train()
    assert json.loads(json.loads(requests[0].content)["manifest"])["selection_strategy"]["tournament_size"] == 2


def test_an_invalid_manifest_never_reaches_the_server(server, tmp_path):
    client, requests = server
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: {name: PPO, lr: -1}\nenvironment: {name: CartPole-v1}\n")
    with pytest.raises(ManifestError, match=r"bad.yaml:1: algorithm.lr"):
        ArenaTrainer.from_manifest(bad, client=client)
    assert requests == []


@pytest.mark.parametrize(("options", "message"), [
    ({"num_nodes": 0}, "integer >= 1"),
    ({"reward_file": "reward.py"}, "reward module"), ({"completion": "42"}, "reward module"),
])
def test_what_the_server_cannot_do_is_refused_before_submitting(server, options, message):
    client, requests = server
    trainer = ArenaTrainer("PPO", "CartPole-v1", client=client)
    with pytest.raises(TrainerConfigError, match=message):
        trainer.train(**options)
    assert requests == []


def test_environment_objects_cannot_be_sent(server):
    import gymnasium as gym

    client, _ = server
    env = gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync")
    try:
        with pytest.raises(TrainerConfigError, match="environment spec or name"):
            ArenaTrainer("PPO", env, client=client)
    finally:
        env.close()
