"""Defaults, bounds, aliases and discriminators of every manifest spec."""

import pytest
from pydantic import ValidationError

from agile_core.specs import (
    CnnConfig,
    GymEnvSpec,
    LstmConfig,
    MlpConfig,
    MultiFrequencySelectionSpec,
    MultiInputConfig,
    MutationProbabilities,
    MutationSpec,
    NetworkSpec,
    ReplayBufferSpec,
    RLHyperparameter,
    TournamentSelectionSpec,
    TrainingSpec,
)
from agile_core.specs.manifest import TrainingManifest
from agile_offpolicy.specs import DDPGSpec, DQNSpec, RainbowDQNSpec, TD3Spec
from agile_onpolicy.specs import PPOSpec, RecurrentPPOSpec

MINIMAL = {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"}}


def test_training_spec_defaults_match_the_reference():
    spec = TrainingSpec()
    expected = {
        "max_steps": 1_000_000, "evo_steps": None, "pop_size": 1, "eval_steps": None, "eval_loop": 1,
        "replay_buffer": None, "hpo": True, "target_score": None, "learning_delay": 0,
        "eps_start": None, "eps_end": None, "eps_decay": None, "checkpoint_steps": None,
        "checkpoint_path": None, "overwrite_checkpoints": False, "evaluation_interval": 10,
        "num_epochs": None, "episode_steps": 500, "sum_scores": True, "reporting_interval": 1024,
        "experience_sharing": False,
    }
    for field, value in expected.items():
        assert getattr(spec, field) == value, field


def test_population_size_is_an_alias_of_pop_size():
    assert TrainingSpec(population_size=6).pop_size == 6
    assert TrainingSpec.model_validate({"population_size": 3}).pop_size == 3
    assert TrainingSpec(pop_size=2).pop_size == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_steps", 0), ("pop_size", 0), ("eval_loop", 0), ("evaluation_interval", 0),
     ("episode_steps", 0), ("reporting_interval", 0), ("learning_delay", -1), ("eps_start", 1.5)],
)
def test_training_spec_bounds(field, value):
    with pytest.raises(ValidationError):
        TrainingSpec(**{field: value})


def test_evo_steps_may_not_exceed_max_steps():
    with pytest.raises(ValidationError, match="must not exceed max_steps"):
        TrainingSpec(max_steps=10, evo_steps=20)


def test_replay_buffer_defaults_and_memory_size_alias():
    spec = ReplayBufferSpec()
    assert (spec.max_size, spec.standard_buffer, spec.n_step_buffer, spec.per_buffer) == (100_000, True, False, False)
    assert spec.n_step_buffer_args.n_step == 3
    assert spec.per_buffer_args.alpha == 0.6
    assert ReplayBufferSpec.model_validate({"memory_size": 500}).max_size == 500
    assert ReplayBufferSpec(memory_size=7).max_size == 7


def test_replay_buffer_n_step_shortcut_turns_n_step_on():
    spec = ReplayBufferSpec(n_step=5)
    assert spec.n_step_buffer and spec.n_step_buffer_args.n_step == 5


def test_mutation_defaults_and_normalised_weights():
    spec = MutationSpec()
    probs = spec.probabilities
    assert (probs.no_mut, probs.arch_mut, probs.new_layer, probs.params_mut, probs.act_mut, probs.rl_hp_mut) == (
        0.4, 0.2, 0.2, 0.2, 0.0, 0.2)
    assert spec.mutation_sd == 0.1 and spec.rand_seed is None and spec.rl_hp_selection is None
    weights = MutationProbabilities(no_mut=0.5, arch_mut=0.3, rl_hp_mut=0.2).operator_weights()
    assert sum(weights.values()) == pytest.approx(1.0)
    with pytest.raises(ValidationError):
        MutationProbabilities(no_mut=0, arch_mut=0, params_mut=0, act_mut=0, rl_hp_mut=0)
    with pytest.raises(ValidationError):
        MutationProbabilities(new_layer=1.5)


def test_rl_hyperparameter_range_must_be_ordered():
    assert RLHyperparameter(min=1, max=1).max == 1
    with pytest.raises(ValidationError, match="must not be below min"):
        RLHyperparameter(min=2, max=1)
    with pytest.raises(ValidationError):
        RLHyperparameter(min=0, max=1, grow_factor=0.5)
    with pytest.raises(ValidationError):
        RLHyperparameter(min=0, max=1, shrink_factor=1.5)


def test_tournament_selection_bounds():
    spec = TournamentSelectionSpec()
    assert (spec.strategy, spec.tournament_size, spec.elitism) == ("tournament", 2, True)
    with pytest.raises(ValidationError):
        TournamentSelectionSpec(tournament_size=1)


def test_selection_section_is_discriminated_by_strategy():
    plain = TrainingManifest.get_validated({**MINIMAL, "tournament_selection": {"tournament_size": 3},
                                            "training": {"pop_size": 4}})
    assert isinstance(plain.selection_strategy, TournamentSelectionSpec)
    mf = TrainingManifest.get_validated({**MINIMAL, "training": {"pop_size": 16},
                                         "selection_strategy": {"strategy": "multi_frequency"}})
    assert isinstance(mf.selection_strategy, MultiFrequencySelectionSpec)


def test_multi_frequency_defaults_resolve_against_pop_size():
    resolved = MultiFrequencySelectionSpec().resolve(16)
    assert (resolved.n_winners, resolved.n_survivors, resolved.n_open_for_migration, resolved.n_losers) == (2, 0, 2, 4)
    assert resolved.evolution_frequency_ratios == [1, 5]
    three = MultiFrequencySelectionSpec(n_subpopulations=3).resolve(18)
    assert three.evolution_frequency_ratios == [1, 5, 10]
    assert three.n_winners + three.n_survivors + three.n_open_for_migration + three.n_losers == 6


@pytest.mark.parametrize(
    ("pop_size", "fields", "message"),
    [
        (4, {}, "pop_size >= 6"),
        (9, {}, "divisible"),
        (8, {"n_subpopulations": 4}, "at least 3"),
        (16, {"n_winners": 5, "n_losers": 5}, "must equal the subpopulation size"),
        (16, {"evolution_frequency_ratios": [1]}, "ratios"),
    ],
)
def test_multi_frequency_layout_errors(pop_size, fields, message):
    with pytest.raises(ValueError, match=message):
        MultiFrequencySelectionSpec(**fields).resolve(pop_size)


def test_network_spec_infers_encoder_kind_from_keys():
    assert isinstance(NetworkSpec(encoder_config={"hidden_size": [32]}).encoder_config, MlpConfig)
    assert isinstance(NetworkSpec(encoder_config={"channel_size": [8], "kernel_size": [3], "stride_size": [1]}).encoder_config, CnnConfig)
    assert isinstance(NetworkSpec(encoder_config={"hidden_state_size": 32}).encoder_config, LstmConfig)
    assert isinstance(NetworkSpec(encoder_config={"mlp_config": {}}).encoder_config, MultiInputConfig)
    assert isinstance(NetworkSpec(encoder_config={"arch": "cnn"}).encoder_config, CnnConfig)
    assert NetworkSpec().encoder_config is None


def test_network_defaults_and_bounds():
    mlp = MlpConfig()
    assert (mlp.activation, mlp.layer_norm, mlp.min_hidden_layers, mlp.max_hidden_layers, mlp.min_mlp_nodes, mlp.max_mlp_nodes) == (
        "ReLU", True, 1, 6, 8, 256)
    assert (CnnConfig().min_channel_size, CnnConfig().max_channel_size) == (8, 256)
    lstm = LstmConfig()
    assert (lstm.num_layers, lstm.min_hidden_state_size, lstm.max_hidden_state_size) == (1, 8, 256)
    with pytest.raises(ValidationError, match="outside"):
        MlpConfig(hidden_size=[4])
    with pytest.raises(ValidationError, match="layers given"):
        MlpConfig(hidden_size=[8] * 7)
    with pytest.raises(ValidationError, match="same length"):
        CnnConfig(channel_size=[8, 8], kernel_size=[3], stride_size=[1])
    with pytest.raises(ValidationError, match="latent_dim"):
        NetworkSpec(latent_dim=4)
    with pytest.raises(ValidationError):
        MlpConfig(activation="Swish")


def test_gym_env_spec_fields():
    spec = GymEnvSpec(name="CartPole-v1")
    assert (spec.num_envs, spec.sync, spec.entrypoint, spec.path, spec.config, spec.wrappers) == (16, True, None, None, {}, [])
    wrapped = GymEnvSpec(name="x", wrappers=["gymnasium.wrappers.RecordEpisodeStatistics",
                                            {"name": "gymnasium.wrappers.TimeLimit", "kwargs": {"max_episode_steps": 5}}])
    assert wrapped.wrappers[0].kwargs == {} and wrapped.wrappers[1].kwargs["max_episode_steps"] == 5
    assert GymEnvSpec(name="x", entrypoint="pkg.mod:Env").is_custom
    assert GymEnvSpec(name="x", path="env.py", entrypoint="MyEnv").is_custom
    with pytest.raises(ValidationError, match=r"package\.module:attribute"):
        GymEnvSpec(name="x", entrypoint="no_colon")
    with pytest.raises(ValidationError):
        GymEnvSpec(name="x", path="env.txt")


ALGORITHM_DEFAULTS = [
    (DQNSpec, {"batch_size": 64, "lr": 1e-4, "learn_step": 5, "gamma": 0.99, "tau": 1e-3, "double": True}),
    (RainbowDQNSpec, {"batch_size": 64, "lr": 1e-4, "learn_step": 5, "gamma": 0.99, "tau": 1e-3, "beta": 0.4,
                      "prior_eps": 1e-6, "num_atoms": 51, "v_min": -10, "v_max": 10, "noise_std": 0.5,
                      "n_step": 3, "combined_reward": False}),
    (DDPGSpec, {"batch_size": 64, "lr_actor": 1e-4, "lr_critic": 1e-3, "learn_step": 5, "gamma": 0.99,
                "tau": 1e-3, "policy_freq": 2, "O_U_noise": True, "expl_noise": 0.1, "vect_noise_dim": 1,
                "mean_noise": 0.0, "theta": 0.15, "dt": 0.01, "share_encoders": False}),
    (TD3Spec, {"tau": 5e-3, "lr_actor": 1e-4, "lr_critic": 1e-3, "policy_freq": 2}),
    (PPOSpec, {"batch_size": 64, "lr": 1e-4, "learn_step": 4096, "gamma": 0.99, "gae_lambda": 0.95,
               "action_std_init": 0.6, "clip_coef": 0.2, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5,
               "target_kl": None, "update_epochs": 4, "share_encoders": True, "recurrent": False,
               "bptt_sequence_type": "chunked", "max_seq_len": None}),
    (RecurrentPPOSpec, {"learn_step": 8192, "recurrent": True}),
]


@pytest.mark.parametrize(("spec", "defaults"), ALGORITHM_DEFAULTS, ids=lambda x: getattr(x, "__name__", ""))
def test_algorithm_defaults(spec, defaults):
    instance = spec()
    for field, value in defaults.items():
        assert getattr(instance, field) == value, field
    assert instance.name == spec.registered_name()


def test_default_mutation_ranges_follow_the_rule():
    dqn = DQNSpec(lr=1e-3, batch_size=64, learn_step=5).default_rl_hp_selection()
    assert dqn["lr"].min == pytest.approx(1e-4) and dqn["lr"].max == pytest.approx(1e-2)
    assert (dqn["batch_size"].min, dqn["batch_size"].max) == (16, 256)
    assert (dqn["learn_step"].min, dqn["learn_step"].max) == (1, 20)
    assert set(DDPGSpec().default_rl_hp_selection()) == {"lr_actor", "lr_critic", "batch_size", "learn_step"}
    ppo = PPOSpec().default_rl_hp_selection()
    assert (ppo["learn_step"].min, ppo["learn_step"].max) == (512, 8192)


def test_manifest_sections_default_and_resolve():
    manifest = TrainingManifest.get_validated(MINIMAL)
    assert manifest.training == TrainingSpec()
    assert manifest.network is None and manifest.mutation is None
    assert manifest.evo_steps == 10_000
    assert isinstance(manifest.resolved_selection(), TournamentSelectionSpec)
    assert manifest.resolved_replay_buffer().max_size == 100_000
    assert set(manifest.resolved_mutation().rl_hp_selection) == {"lr", "batch_size", "learn_step"}


def test_manifest_round_trips_through_its_dict():
    manifest = TrainingManifest.get_validated("configs/training/dqn.yaml")
    again = TrainingManifest.get_validated(manifest.to_dict())
    assert again.to_dict() == manifest.to_dict()
    assert again.algorithm.lr == pytest.approx(6.3e-4)


def test_scientific_notation_without_a_dot_is_a_float():
    manifest = TrainingManifest.from_text("algorithm: {name: DQN, lr: 1e-3}\nenvironment: {name: CartPole-v1}\n")
    assert manifest.algorithm.lr == pytest.approx(1e-3)


def test_training_replay_buffer_is_used_when_no_top_level_section():
    manifest = TrainingManifest.get_validated({**MINIMAL, "training": {"replay_buffer": {"max_size": 100}}})
    assert manifest.resolved_replay_buffer().max_size == 100


def test_manifest_from_model_instances():
    manifest = TrainingManifest(
        algorithm=DQNSpec(), environment=GymEnvSpec(name="CartPole-v1"), training=TrainingSpec(pop_size=2)
    )
    assert manifest.training.pop_size == 2 and isinstance(manifest.algorithm, DQNSpec)
    assert TrainingManifest.get_validated(manifest) is manifest


def test_a_range_for_a_hyperparameter_the_algorithm_fixes_is_warned_about_and_ignored():
    from agile_core.trainer import LocalTrainer

    manifest = TrainingManifest.get_validated({
        "algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"},
        "training": {"max_steps": 100, "pop_size": 2},
        "mutation": {"rl_hp_selection": {"max_grad_norm": {"min": 1, "max": 20}, "lr": {"min": 1e-5, "max": 1e-2}}},
    })
    assert "max_grad_norm" not in DQNSpec.mutable_hyperparameters() and "lr" in DQNSpec.mutable_hyperparameters()
    messages = [note.message for note in manifest.warnings if note.path[-1] == "max_grad_norm"]
    assert messages and "fixes max_grad_norm for the whole run" in messages[0]
    trainer = LocalTrainer.from_manifest(manifest)
    assert set(trainer.make_hp_config()) == {"lr"}
