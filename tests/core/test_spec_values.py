"""Values are checked where they are defined, so `agile validate` catches what training would
reject: non-finite floats, booleans for numbers, probabilities, seeds and sizes out of range."""

from __future__ import annotations

import copy

import pytest

from agile_core.errors import ManifestError
from agile_core.specs.manifest import TrainingManifest

BASE = {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"}}


@pytest.mark.parametrize(("section", "field", "value", "message"), [
    ("algorithm", "lr", float("inf"), "algorithm.lr: input should be a finite number"),
    ("mutation", "mutation_sd", float("inf"), "mutation.mutation_sd: input should be a finite number"),
    ("training", "target_score", float("nan"), "training.target_score: input should be a finite number"),
    ("algorithm", "batch_size", True, "algorithm.batch_size: must be a number, not a boolean"),
    ("training", "max_steps", False, "training.max_steps: must be a number, not a boolean"),
    ("training", "seed", 2**70, "training.seed: input should be less than or equal to 4294967295"),
    ("training", "seed", -1, "training.seed: input should be greater than or equal to 0"),
    ("mutation", "rand_seed", -5, "mutation.rand_seed: input should be greater than or equal to 0"),
    ("training", "pop_size", 100_000_000, "training.pop_size: input should be less than or equal to 4096"),
    ("environment", "num_envs", 10**9, "environment.num_envs: input should be less than or equal to 65536"),
    ("replay_buffer", "per_buffer_args", {"alpha": 1.5}, "replay_buffer.per_buffer_args.alpha"),
], ids=lambda value: str(value)[:24])
def test_bad_values_are_refused_with_their_path(section, field, value, message):
    data = copy.deepcopy(BASE)
    data.setdefault(section, {})[field] = value
    with pytest.raises(ManifestError) as caught:
        TrainingManifest.get_validated(data)
    assert message in str(caught.value)


def test_booleans_stay_valid_for_boolean_fields():
    data = copy.deepcopy(BASE)
    data["algorithm"]["double"] = False
    assert TrainingManifest.get_validated(data).algorithm.double is False


def test_distribution_support_must_be_ordered():
    data = {"algorithm": {"name": "RainbowDQN", "v_min": 5.0, "v_max": 1.0}, "environment": {"name": "CartPole-v1"}}
    with pytest.raises(ManifestError, match=r"algorithm\.v_max: must be greater than v_min \(5\.0\)"):
        TrainingManifest.get_validated(data)


def test_resolved_manifest_json_hides_secret_like_values():
    data = {"algorithm": {"name": "DQN"},
            "environment": {"name": "CartPole-v1", "config": {"api_token": "SECRET-1", "max_episode_steps": 100}}}
    text = TrainingManifest.get_validated(data).to_json()
    assert "SECRET-1" not in text and '"api_token": "***"' in text and '"max_episode_steps": 100' in text


@pytest.mark.parametrize(("manifest", "message"), [
    ({"algorithm": {"name": "DDPG", "vect_noise_dim": 3}, "environment": {"name": "Pendulum-v1", "num_envs": 4}},
     "algorithm.vect_noise_dim: must be 1 (one noise stream for all sub-envs) or environment.num_envs (4"),
    ({"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"}, "replay_buffer": {"n_step": 3}},
     "replay_buffer.n_step: DQN learns from a standard replay buffer only"),
    ({"algorithm": {"name": "TD3"}, "environment": {"name": "Pendulum-v1"}, "replay_buffer": {"per_buffer": True}},
     "replay_buffer.per_buffer: TD3 learns from a standard replay buffer only"),
    ({"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"},
      "network": {"encoder_config": {"arch": "lstm"}}},
     "network.encoder_config.arch: DQN has no recurrent policy"),
    ({"algorithm": {"name": "PPO", "recurrent": False}, "environment": {"name": "CartPole-v1"},
      "network": {"encoder_config": {"arch": "lstm"}}},
     "network.encoder_config.arch: an LSTM encoder needs a recurrent policy: set algorithm.recurrent: true"),
], ids=["noise-streams", "n-step-on-dqn", "per-on-td3", "lstm-on-dqn", "lstm-without-recurrent"])
def test_cross_section_rules_name_the_field(manifest, message):
    with pytest.raises(ManifestError) as caught:
        TrainingManifest.get_validated(manifest)
    assert message in str(caught.value)


@pytest.mark.parametrize("manifest", [
    {"algorithm": {"name": "DDPG", "vect_noise_dim": 4}, "environment": {"name": "Pendulum-v1", "num_envs": 4}},
    {"algorithm": {"name": "RainbowDQN"}, "environment": {"name": "CartPole-v1"},
     "replay_buffer": {"n_step": 3, "per_buffer": True}},
    {"algorithm": {"name": "PPO", "recurrent": True}, "environment": {"name": "CartPole-v1"},
     "network": {"encoder_config": {"arch": "lstm"}}},
], ids=["noise-per-env", "rainbow-n-step-per", "recurrent-ppo"])
def test_cross_section_rules_accept_what_trains(manifest):
    TrainingManifest.get_validated(manifest)


def test_misspelled_secret_fields_are_hidden_in_errors_and_counts_are_not():
    data = {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"},
            "training": {"wandb_api_kye": "SECRET-A", "wandb_pasword": "SECRET-B", "api_tokn": "SECRET-C"}}
    with pytest.raises(ManifestError) as caught:
        TrainingManifest.get_validated(data)
    text = str(caught.value)
    assert "SECRET" not in text and text.count("'***'") == 3
    from agile_core.errors import is_secret_name

    assert not any(is_secret_name(name) for name in ("max_new_tokens", "learn_step", "select", "target_score"))
