"""Unit tests of the DQN agent: spaces, acting, the TD target, learning, cloning and mutation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.algorithms.spaces import UnsupportedSpaceError
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_offpolicy.buffers import ReplayBuffer
from agile_offpolicy.dqn import DQN

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = spaces.Discrete(3)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


def make_agent(**kwargs) -> DQN:
    options = {"net_config": NET, "seed": 0, "batch_size": 16, "lr": 1e-3}
    options.update(kwargs)
    return DQN(OBS, ACT, **options)


def random_batch(n: int = 32, seed: int = 0, terminal: float = 0.5):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    next_obs = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    actions = rng.integers(0, 3, n)
    rewards = rng.normal(size=n).astype(np.float32)
    terminated = (rng.random(n) < terminal).astype(np.float32)
    return (torch.as_tensor(obs), torch.as_tensor(actions), torch.as_tensor(rewards),
            torch.as_tensor(next_obs), torch.as_tensor(terminated))


# ---------------------------------------------------------------------------- spaces
def test_rejects_box_actions_with_a_precise_message() -> None:
    with pytest.raises(UnsupportedSpaceError, match=r"DQN does not support action space Box\(2,\); supported: Discrete"):
        DQN(OBS, spaces.Box(-1, 1, (2,)))


@pytest.mark.parametrize("action_space", [spaces.MultiDiscrete([2, 2]), spaces.MultiBinary(3)])
def test_rejects_other_discrete_like_action_spaces(action_space: spaces.Space) -> None:
    with pytest.raises(UnsupportedSpaceError, match=r"supported: Discrete$"):
        DQN(OBS, action_space)


def test_rejects_unsupported_observation_space() -> None:
    with pytest.raises(UnsupportedSpaceError, match="observation space Text"):
        DQN(spaces.Text(5), ACT)


@pytest.mark.parametrize("bad", [{"batch_size": 0}, {"learn_step": 0}, {"gamma": 0.0}, {"tau": 1.5}, {"lr": -1.0}])
def test_rejects_bad_hyperparameters(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        make_agent(**bad)


def test_rejects_recurrent_network() -> None:
    with pytest.raises(ValueError, match="recurrent"):
        DQN(OBS, ACT, net_config={"encoder_config": {"arch": "lstm"}})


def test_accepts_discrete_and_dict_observations() -> None:
    agent = DQN(spaces.Discrete(5), ACT, net_config=NET)
    assert agent.get_action(np.array([0, 4, 2])).shape == (3,)
    dict_space = spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)})
    agent = DQN(dict_space, ACT)
    obs = {"a": np.zeros((2, 2), np.float32), "b": np.array([0, 2])}
    assert agent.get_action(obs).shape == (2,)


# ---------------------------------------------------------------------------- acting
def test_action_shapes_dtype_and_range() -> None:
    agent = make_agent()
    batch = np.random.default_rng(0).uniform(-1, 1, (7, 4)).astype(np.float32)
    actions = agent.get_action(batch)
    assert actions.shape == (7,) and actions.dtype == np.int64
    assert ((actions >= 0) & (actions < 3)).all()
    assert agent.get_action(batch[0]).shape == (1,)


def test_greedy_actions_are_the_argmax() -> None:
    agent = make_agent()
    batch = np.random.default_rng(1).uniform(-1, 1, (20, 4)).astype(np.float32)
    with torch.no_grad():
        expected = agent.actor(torch.as_tensor(batch)).argmax(-1).numpy()
    np.testing.assert_array_equal(agent.get_action(batch, epsilon=0.0), expected)


def test_epsilon_one_explores_uniformly_and_is_seeded() -> None:
    batch = np.zeros((3000, 4), np.float32)
    actions = make_agent(seed=3).get_action(batch, epsilon=1.0)
    counts = np.bincount(actions, minlength=3) / len(actions)
    assert np.allclose(counts, 1 / 3, atol=0.04)
    np.testing.assert_array_equal(actions, make_agent(seed=3).get_action(batch, epsilon=1.0))


def test_action_mask_restricts_greedy_and_random_choices() -> None:
    agent = make_agent()
    batch = np.random.default_rng(2).uniform(-1, 1, (500, 4)).astype(np.float32)
    mask = np.zeros((500, 3), dtype=np.int8)
    mask[:, 1] = 1
    mask[::2, 2] = 1
    for epsilon in (0.0, 1.0):
        actions = agent.get_action(batch, epsilon=epsilon, action_mask=mask)
        assert mask[np.arange(500), actions].all()
    random_actions = agent.get_action(batch, epsilon=1.0, action_mask=mask)
    assert set(random_actions[::2].tolist()) == {1, 2}
    with pytest.raises(ValueError, match="no allowed action"):
        agent.get_action(batch[:1], action_mask=np.zeros((1, 3)))


def test_discrete_start_offset_round_trips() -> None:
    agent = DQN(OBS, spaces.Discrete(3, start=5), net_config=NET, seed=0)
    actions = agent.get_action(np.zeros((50, 4), np.float32), epsilon=1.0)
    assert set(actions.tolist()) <= {5, 6, 7}
    obs, _, rewards, next_obs, terminated = random_batch(50)
    agent.learn((obs, torch.as_tensor(actions), rewards, next_obs, terminated))


# ---------------------------------------------------------------------------- learning
def test_learn_reduces_td_loss_on_a_fixed_batch() -> None:
    agent = make_agent(lr=3e-3, tau=1e-3)
    batch = random_batch(64, terminal=0.5)
    first = agent.learn(batch)
    for _ in range(300):
        last = agent.learn(batch)
    assert last < 0.2 * first
    assert agent.learn_counter == 301


def test_learn_accepts_a_replay_buffer_batch() -> None:
    agent = make_agent()
    memory = ReplayBuffer(100, OBS, ACT, seed=0)
    obs, actions, rewards, next_obs, terminated = (x.numpy() for x in random_batch(40))
    memory.add(obs, actions, rewards, next_obs, terminated)
    loss = agent.learn(memory.sample(16))
    assert np.isfinite(loss)


@pytest.mark.parametrize("double", [True, False])
def test_td_target_double_and_vanilla(double: bool) -> None:
    agent = make_agent(double=double, gamma=0.9)
    with torch.no_grad():  # make the target differ from the online network
        for param in agent.actor_target.parameters():
            param.add_(torch.randn_like(param) * 0.5)
    _, _, rewards, next_obs, terminated = random_batch(200)
    with torch.no_grad():
        q_online = agent.actor(next_obs)
        q_target = agent.actor_target(next_obs)
    picked = q_online.argmax(-1) if double else q_target.argmax(-1)
    expected = rewards + 0.9 * (1 - terminated) * q_target.gather(-1, picked[:, None]).squeeze(-1)
    torch.testing.assert_close(agent.td_target(rewards, next_obs, terminated), expected)
    # the two rules really differ on this batch (otherwise the test would not tell them apart)
    assert (q_online.argmax(-1) != q_target.argmax(-1)).any()


def test_terminated_rows_do_not_bootstrap() -> None:
    agent = make_agent()
    _, _, rewards, next_obs, _ = random_batch(10)
    target = agent.td_target(rewards, next_obs, torch.ones(10))
    torch.testing.assert_close(target, rewards)


def test_soft_update_math() -> None:
    agent = make_agent(tau=0.25)
    with torch.no_grad():
        for param in agent.actor.parameters():
            param.add_(1.0)
    online = [p.detach().clone() for p in agent.actor.parameters()]
    before = [p.detach().clone() for p in agent.actor_target.parameters()]
    agent.soft_update()
    for new, o, b in zip(agent.actor_target.parameters(), online, before, strict=True):
        torch.testing.assert_close(new, 0.25 * o + 0.75 * b)


def test_learn_moves_target_by_tau() -> None:
    agent = make_agent(tau=1.0)
    agent.learn(random_batch())
    for online, target in zip(agent.actor.parameters(), agent.actor_target.parameters(), strict=True):
        torch.testing.assert_close(online, target)


# ---------------------------------------------------------------------------- clone and mutation
def test_clone_is_independent() -> None:
    agent = make_agent()
    agent.fitness.append(1.0)
    twin = agent.clone(index=7)
    assert twin.index == 7 and twin.lineage.parent_id == agent.index and twin.fitness == [1.0]
    before = [p.detach().clone() for p in agent.actor.parameters()]
    for _ in range(5):
        twin.learn(random_batch())
    for param, old in zip(agent.actor.parameters(), before, strict=True):
        torch.testing.assert_close(param, old)
    twin_params = {id(p) for p in twin.actor.parameters()}
    assert all(id(p) in twin_params for group in twin.optimizer.param_groups for p in group["params"])
    assert not twin_params & {id(p) for p in agent.actor.parameters()}
    batch = np.zeros((200, 4), np.float32)
    assert not np.array_equal(twin.get_action(batch, epsilon=1.0), agent.get_action(batch, epsilon=1.0))


@pytest.mark.parametrize("new_layer_prob", [1.0, 0.0])
def test_architecture_and_lr_mutation_then_learn_updates_all_params(new_layer_prob: float) -> None:
    hp = HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1e-2))
    agent = make_agent(hp_config=hp)
    rng = np.random.default_rng(0)
    config_before = agent.actor.config
    applied = agent.mutate_architecture(rng, new_layer_prob)
    assert applied is not None and agent.actor.config != config_before
    assert agent.actor_target.config == agent.actor.config  # the target followed
    assert not any(p.requires_grad for p in agent.actor_target.parameters())
    change = agent.mutate_hyperparameter(rng)
    assert change is not None and change["hyperparameter"] == "lr"
    assert all(group["lr"] == agent.lr for group in agent.optimizer.param_groups)

    optimised = {id(p) for group in agent.optimizer.param_groups for p in group["params"]}
    assert optimised == {id(p) for p in agent.actor.parameters()}
    before = {name: p.detach().clone() for name, p in agent.actor.named_parameters()}
    for seed in range(5):
        agent.learn(random_batch(seed=seed))
    unchanged = [name for name, p in agent.actor.named_parameters() if torch.equal(p, before[name])]
    assert not unchanged


def test_test_appends_mean_greedy_return() -> None:
    env = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point")
    agent = DQN(env.single_observation_space, env.single_action_space, net_config=NET, seed=0)
    score = agent.test(env, loop=2)
    assert agent.fitness == [score] and score > 0
    capped = agent.test(env, max_steps=5)
    assert capped <= 5.0 and agent.fitness[-1] == capped


def test_hyperparameters_are_declared() -> None:
    agent = make_agent()
    assert agent.hyperparameters() == {"lr": 1e-3, "batch_size": 16, "learn_step": 5, "gamma": 0.99, "tau": 1e-3}


def test_actor_network_is_cloned_and_checked() -> None:
    from agile_core.networks import QNetwork

    network = QNetwork(OBS, ACT, NET)
    agent = DQN(OBS, ACT, actor_network=network)
    assert agent.actor is not network and agent.actor.config == network.config
    with pytest.raises(ValueError, match="QNetwork with 3 outputs"):
        DQN(OBS, ACT, actor_network=QNetwork(OBS, spaces.Discrete(2), NET))


def test_architecture_mutation_is_reproducible_on_the_target_too() -> None:
    def mutated() -> DQN:
        agent = make_agent()
        agent.mutate_architecture(np.random.default_rng(5), new_layer_prob=1.0)
        return agent

    first, second = mutated(), mutated()
    for name in ("actor", "actor_target"):
        for a, b in zip(getattr(first, name).parameters(), getattr(second, name).parameters(), strict=True):
            torch.testing.assert_close(a, b)


def test_checkpoint_round_trip_after_mutation(tmp_path) -> None:
    agent = make_agent(hp_config=HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1e-2)))
    agent.mutate_architecture(np.random.default_rng(1), new_layer_prob=1.0)
    agent.set_hyperparameter("lr", 2e-3)
    agent.learn(random_batch())
    path = agent.save_checkpoint(tmp_path / "dqn")
    restored = DQN.load(path)
    assert isinstance(restored, DQN) and restored.hyperparameters() == agent.hyperparameters()
    assert restored.actor.config == agent.actor.config == restored.actor_target.config
    batch = np.random.default_rng(0).uniform(-1, 1, (50, 4)).astype(np.float32)
    np.testing.assert_array_equal(restored.get_action(batch, epsilon=0.5), agent.get_action(batch, epsilon=0.5))
    torch.testing.assert_close(restored.learn(random_batch(seed=3)), agent.learn(random_batch(seed=3)))


def test_loss_and_clipping_come_from_the_manifest_and_bad_values_name_their_field() -> None:
    import yaml

    from agile_core.errors import ManifestError
    from agile_core.specs.manifest import validate_source
    from agile_core.trainer import LocalTrainer
    from agile_core.yaml_source import parse_text

    def manifest(data: dict) -> object:
        return validate_source(parse_text(yaml.safe_dump(data)))

    base = {"algorithm": {"name": "DQN", "loss": "huber", "max_grad_norm": 10.0},
            "environment": {"name": "CartPole-v1", "num_envs": 2}, "training": {"pop_size": 2}}
    trainer = LocalTrainer.from_manifest(manifest(base))
    env = trainer.make_env()
    agents = trainer.make_population(env, None)
    assert [(agent.loss, agent.max_grad_norm) for agent in agents] == [("huber", 10.0)] * 2
    assert DQN(OBS, ACT).loss == "mse" and DQN(OBS, ACT).max_grad_norm == 10.0  # the spec's defaults
    assert agents[0].population_key() != DQN(OBS, ACT).population_key()  # no group mixes two losses
    for field, value in (("loss", "l1"), ("max_grad_norm", 0.0)):
        bad = {**base, "algorithm": {**base["algorithm"], field: value}}
        with pytest.raises(ManifestError, match=f"algorithm.{field}"):
            manifest(bad)
