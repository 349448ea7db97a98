"""Unit tests of DDPG and TD3: spaces, acting within bounds, exploration, the critic and actor
updates, twin-critic targets with smoothing, soft updates, cloning, mutation and checkpoints."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.algorithms.exploration import GaussianNoise, OrnsteinUhlenbeckNoise
from agile_core.algorithms.group import with_member_axis
from agile_core.algorithms.spaces import UnsupportedSpaceError
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_offpolicy.buffers import ReplayBuffer
from agile_offpolicy.ddpg import DDPG, soft_update
from agile_offpolicy.td3 import TD3

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))  # asymmetric bounds
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}
ALGOS = [DDPG, TD3]


def make_agent(cls: type[DDPG] = DDPG, **kwargs) -> DDPG:
    options = {"net_config": NET, "seed": 0, "batch_size": 32, "lr_actor": 1e-3, "lr_critic": 1e-3}
    options.update(kwargs)
    return cls(OBS, ACT, **options)


def random_batch(n: int = 64, seed: int = 0, terminal: float = 0.3):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    next_obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    actions = rng.uniform(ACT.low, ACT.high, (n, 2)).astype(np.float32)
    rewards = rng.normal(size=n).astype(np.float32)
    terminated = (rng.random(n) < terminal).astype(np.float32)
    return tuple(torch.as_tensor(x) for x in (obs, actions, rewards, next_obs, terminated))


def params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def changed(before: list[torch.Tensor], module: torch.nn.Module) -> list[bool]:
    return [not torch.equal(b, p) for b, p in zip(before, module.parameters(), strict=True)]


def set_constant_output(network: torch.nn.Module, value: float) -> None:
    """Make a critic output `value` for every input (zero output weights, constant bias)."""
    with torch.no_grad():
        network.head.output_layer.weight.zero_()
        network.head.output_layer.bias.fill_(value)


# ---------------------------------------------------------------------------- spaces and arguments
@pytest.mark.parametrize("cls", ALGOS)
@pytest.mark.parametrize("action_space", [spaces.Discrete(3), spaces.MultiDiscrete([2, 2]), spaces.MultiBinary(2)])
def test_rejects_non_box_actions_with_a_precise_message(cls: type[DDPG], action_space: spaces.Space) -> None:
    with pytest.raises(UnsupportedSpaceError, match=f"{cls.__name__} does not support action space .*supported: Box"):
        cls(OBS, action_space)


@pytest.mark.parametrize("cls", ALGOS)
def test_rejects_unbounded_actions_and_recurrent_networks(cls: type[DDPG]) -> None:
    with pytest.raises(UnsupportedSpaceError, match="finite action bounds"):
        cls(OBS, spaces.Box(-np.inf, np.inf, (2,)))
    with pytest.raises(ValueError, match="recurrent"):
        cls(OBS, ACT, net_config={"encoder_config": {"arch": "lstm"}})


@pytest.mark.parametrize("bad", [{"batch_size": 0}, {"learn_step": 0}, {"policy_freq": 0}, {"gamma": 0.0},
                                 {"tau": 1.5}, {"lr_actor": -1.0}, {"lr_critic": 0.0}, {"expl_noise": -0.1},
                                 {"vect_noise_dim": 0}, {"dt": 0.0}, {"policy_noise": -1.0}, {"noise_clip": -1.0}])
def test_rejects_bad_hyperparameters(bad: dict) -> None:
    cls = TD3 if set(bad) & {"policy_noise", "noise_clip"} else DDPG
    with pytest.raises(ValueError, match=next(iter(bad))):
        make_agent(cls, **bad)


def test_declared_hyperparameters_networks_and_optimizers() -> None:
    required = {"lr_actor", "lr_critic", "batch_size", "learn_step", "gamma", "tau", "policy_freq"}
    ddpg, td3 = make_agent(DDPG), make_agent(TD3)
    assert required <= set(DDPG.hyperparameter_names) and required <= set(TD3.hyperparameter_names)
    assert ddpg.network_names == ["actor", "actor_target", "critic", "critic_target"]
    assert td3.network_names == ["actor", "actor_target", "critic_1", "critic_1_target", "critic_2", "critic_2_target"]
    assert td3.tau == 5e-3 and ddpg.tau == 1e-3  # the spec defaults
    optimised = {id(p) for group in td3.critic_optimizer.param_groups for p in group["params"]}
    assert optimised == {id(p) for c in (td3.critic_1, td3.critic_2) for p in c.parameters()}
    assert not any(p.requires_grad for p in td3.critic_1_target.parameters())


@pytest.mark.parametrize("cls", ALGOS)
def test_dict_observations(cls: type[DDPG]) -> None:
    obs_space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "mode": spaces.Discrete(3)})
    agent = cls(obs_space, ACT, net_config=NET, seed=0)
    obs = {"pos": np.zeros((4, 2), np.float32), "mode": np.array([0, 1, 2, 0])}
    assert agent.get_action(obs, training=False).shape == (4, 2)
    batch = (obs, torch.zeros(4, 2), torch.zeros(4), obs, torch.zeros(4))
    for _ in range(2):
        assert np.isfinite(agent.learn(batch)["critic"])


# ---------------------------------------------------------------------------- acting
@pytest.mark.parametrize("cls", ALGOS)
@pytest.mark.parametrize("ou", [True, False])
def test_actions_respect_bounds_even_with_large_noise(cls: type[DDPG], ou: bool) -> None:
    agent = make_agent(cls, O_U_noise=ou, expl_noise=5.0, dt=1.0, vect_noise_dim=64)
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 3)).astype(np.float32)
    seen_low = seen_high = False
    for _ in range(20):
        actions = agent.get_action(obs)
        assert actions.shape == (64, 2) and actions.dtype == np.float32
        assert (actions >= ACT.low).all() and (actions <= ACT.high).all()
        seen_low |= bool((actions == ACT.low).any())
        seen_high |= bool((actions == ACT.high).any())
    assert seen_low and seen_high  # the noise really pushed actions to both bounds (and was clipped)
    greedy = agent.get_action(obs, training=False)
    assert (greedy >= ACT.low).all() and (greedy <= ACT.high).all()
    np.testing.assert_array_equal(greedy, agent.get_action(obs, training=False))
    assert agent.get_action(obs[0], training=False).shape == (1, 2)  # an unbatched observation


def test_noise_is_scaled_by_half_the_action_range() -> None:
    wide = spaces.Box(-100.0, 100.0, (1,), np.float32)
    agent = DDPG(OBS, wide, net_config=NET, seed=0, O_U_noise=False, expl_noise=0.01, vect_noise_dim=5000)
    obs = np.zeros((5000, 3), np.float32)
    noise = agent.get_action(obs).astype(np.float64) - agent.get_action(obs, training=False)
    assert abs(noise.std() - 0.01 * 100.0) < 0.05


def test_noise_streams_per_sub_env_or_one_shared_stream() -> None:
    obs = np.zeros((4, 3), np.float32)
    shared = make_agent(O_U_noise=False, expl_noise=0.01, vect_noise_dim=1)
    offsets = shared.get_action(obs).astype(np.float64) - shared.get_action(obs, training=False)
    np.testing.assert_allclose(offsets, offsets[:1].repeat(4, axis=0), atol=1e-6)
    per_env = make_agent(O_U_noise=False, expl_noise=0.01, vect_noise_dim=4)
    offsets = per_env.get_action(obs).astype(np.float64) - per_env.get_action(obs, training=False)
    assert not np.allclose(offsets[0], offsets[1])
    with pytest.raises(ValueError, match=r"3 exploration noise streams.*4 observations"):
        make_agent(vect_noise_dim=3).get_action(obs)
    with pytest.raises(ValueError, match="action_mask"):
        per_env.get_action(obs, action_mask=np.ones((4, 2)))


def test_epsilon_replaces_rows_by_uniform_random_actions() -> None:
    agent = make_agent(O_U_noise=False, expl_noise=0.0)
    obs = np.zeros((4000, 3), np.float32)
    greedy = agent.get_action(obs, training=False)
    np.testing.assert_array_equal(agent.get_action(obs), greedy)  # no noise, no epsilon: the actor's action
    mixed = agent.get_action(obs, epsilon=0.25)
    replaced = np.any(mixed != greedy, axis=1)
    assert 0.22 < replaced.mean() < 0.28
    uniform = agent.get_action(obs, epsilon=1.0)
    assert (uniform >= ACT.low).all() and (uniform <= ACT.high).all()
    np.testing.assert_allclose(uniform.mean(axis=0), (ACT.low + ACT.high) / 2, atol=0.05)
    np.testing.assert_allclose(uniform.std(axis=0), (ACT.high - ACT.low) / np.sqrt(12), atol=0.05)
    np.testing.assert_array_equal(agent.get_action(obs, training=False, epsilon=1.0), greedy)


def test_reset_action_noise_per_sub_env() -> None:
    agent = make_agent(O_U_noise=True, expl_noise=0.5, vect_noise_dim=3)
    obs = np.zeros((3, 3), np.float32)
    for _ in range(10):
        agent.get_action(obs)
    noise = agent.exploration
    assert isinstance(noise, OrnsteinUhlenbeckNoise) and np.abs(noise.state).min() > 0
    before = noise.state.copy()
    agent.reset_action_noise(np.array([False, True, False]))
    np.testing.assert_array_equal(noise.state[1], 0.0)
    np.testing.assert_array_equal(noise.state[[0, 2]], before[[0, 2]])
    shared = make_agent(O_U_noise=True, expl_noise=0.5, vect_noise_dim=1)
    shared.get_action(obs)
    shared.reset_action_noise(np.array([False, False, False]))
    assert np.abs(shared.exploration.state).min() > 0
    shared.reset_action_noise(np.array([False, True, False]))
    np.testing.assert_array_equal(shared.exploration.state, 0.0)


def test_noise_hyperparameters_reconfigure_the_process() -> None:
    agent = make_agent(O_U_noise=True)
    agent.set_hyperparameter("expl_noise", 0.3)
    agent.set_hyperparameter("theta", 0.5)
    assert agent.exploration.sigma == 0.3 and agent.exploration.theta == 0.5
    gaussian = make_agent(O_U_noise=False)
    gaussian.set_hyperparameter("expl_noise", 0.2)
    assert isinstance(gaussian.exploration, GaussianNoise) and gaussian.exploration.std == 0.2


# ---------------------------------------------------------------------------- learning
@pytest.mark.parametrize("cls", ALGOS)
def test_critic_loss_decreases_on_a_fixed_batch(cls: type[DDPG]) -> None:
    agent = make_agent(cls, lr_critic=3e-3)
    batch = random_batch()
    losses = [agent.learn(batch)["critic"] for _ in range(150)]
    assert all(np.isfinite(losses))
    assert np.mean(losses[-10:]) < 0.3 * np.mean(losses[:5])


@pytest.mark.parametrize("cls", ALGOS)
def test_actor_updates_only_every_policy_freq_calls_with_the_targets(cls: type[DDPG]) -> None:
    agent = make_agent(cls, policy_freq=3)
    batch = random_batch()
    for call in range(1, 7):
        actor_before, target_before = params(agent.actor), params(agent.critic_targets[0])
        critic_before = params(agent.critics[0])
        losses = agent.learn(batch)
        updates_actor = call % 3 == 0
        assert ("actor" in losses) == updates_actor
        assert any(changed(actor_before, agent.actor)) == updates_actor
        assert any(changed(target_before, agent.critic_targets[0])) == updates_actor
        assert all(changed(critic_before, agent.critics[0]))  # the critic learns at every call
    assert agent.learn_counter == 6


@pytest.mark.parametrize("cls", ALGOS)
def test_soft_update_math(cls: type[DDPG]) -> None:
    agent = make_agent(cls, tau=0.3, policy_freq=1)
    # Make the targets differ from the online networks first, so the average is visible.
    with torch.no_grad():
        for _, target in agent.target_pairs():
            for p in target.parameters():
                p.add_(torch.randn_like(p))
    targets_before = [params(target) for _, target in agent.target_pairs()]
    agent.learn(random_batch())
    for (online, target), before in zip(agent.target_pairs(), targets_before, strict=True):
        for t0, o1, t1 in zip(before, online.parameters(), target.parameters(), strict=True):
            torch.testing.assert_close(t1, 0.3 * o1.detach() + 0.7 * t0)


def test_soft_update_function_and_hard_copy() -> None:
    online, target = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    expected = [0.25 * o.detach() + 0.75 * t.detach() for o, t in zip(online.parameters(), target.parameters(), strict=True)]
    soft_update(online, target, 0.25)
    for e, t in zip(expected, target.parameters(), strict=True):
        torch.testing.assert_close(t, e)
    soft_update(online, target, 1.0)
    for o, t in zip(online.parameters(), target.parameters(), strict=True):
        torch.testing.assert_close(t, o)


def test_ddpg_td_target_uses_the_target_actor_and_critic() -> None:
    agent = make_agent(DDPG, gamma=0.9, policy_freq=100)
    set_constant_output(agent.critic_target, 2.0)
    obs, actions, rewards, next_obs, terminated = random_batch()
    with torch.no_grad():
        q = agent.critic(obs, agent._normalise(actions)).squeeze(-1)
    y = rewards + 0.9 * (1 - terminated) * 2.0
    expected = torch.mean((q - y) ** 2)
    loss = agent.learn((obs, actions, rewards, next_obs, terminated))["critic"]
    assert loss == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize(("q1", "q2"), [(5.0, -3.0), (-3.0, 5.0)])
def test_td3_target_uses_the_smaller_twin_critic(q1: float, q2: float) -> None:
    agent = make_agent(TD3, gamma=0.9, policy_freq=100)
    set_constant_output(agent.critic_1_target, q1)
    set_constant_output(agent.critic_2_target, q2)
    obs, actions, rewards, next_obs, terminated = random_batch()
    group, next_state = agent.solo_group(), with_member_axis(agent._observation(next_obs))
    with torch.no_grad():
        weights = torch.ones(1, next_state.shape[1])
        bootstrap = TD3._critic_values(group, "critic_targets", next_state,
                                       TD3._target_actions(group, next_state, weights)).amin(dim=0)[0]
        normalised = agent._normalise(actions)
        qs = [critic(obs, normalised).squeeze(-1) for critic in (agent.critic_1, agent.critic_2)]
    torch.testing.assert_close(bootstrap, torch.full_like(bootstrap, -3.0))
    y = rewards + 0.9 * (1 - terminated) * -3.0
    expected = sum(torch.mean((q - y) ** 2) for q in qs)
    loss = agent.learn((obs, actions, rewards, next_obs, terminated))["critic"]
    assert loss == pytest.approx(float(expected), rel=1e-5)


def test_td3_smoothing_noise_is_clipped_and_actions_stay_in_range() -> None:
    agent = make_agent(TD3, policy_noise=1000.0, noise_clip=0.1)
    next_obs = with_member_axis(agent._observation(random_batch(256)[3]))
    with torch.no_grad():
        clean, smoothed = target_actions(agent, next_obs)
    deviation = smoothed - clean
    inside = (clean.abs() < 0.9)  # away from the bounds, the only change is the clipped noise
    assert deviation.abs().max() <= 0.1 + 1e-6
    assert torch.allclose(deviation[inside].abs(), torch.full_like(deviation[inside], 0.1), atol=1e-6)
    assert smoothed.min() >= -1.0 and smoothed.max() <= 1.0
    quiet = make_agent(TD3, policy_noise=0.0)
    with torch.no_grad():
        clean, smoothed = target_actions(quiet, next_obs)
        torch.testing.assert_close(smoothed, clean)


def target_actions(agent: TD3, next_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target actor's normalised actions ``[1, rows, dim]`` without and with smoothing noise."""
    group = agent.solo_group()
    weights = torch.full((1, next_obs.shape[1]), 1.0 / next_obs.shape[1])
    return TD3._policy_actions(group, "actor_target", next_obs), TD3._target_actions(group, next_obs, weights)


def test_td3_smoothing_noise_distribution() -> None:
    agent = make_agent(TD3, policy_noise=0.2, noise_clip=0.5)
    next_obs = with_member_axis(agent._observation(np.zeros((20000, 3), np.float32)))
    with torch.no_grad():
        clean, smoothed = target_actions(agent, next_obs)
        deviation = smoothed - clean
    inside = clean.abs() < 0.3
    sample = deviation[inside.expand_as(deviation)]
    assert abs(float(sample.std()) - 0.2) < 0.01 and float(sample.abs().max()) <= 0.5 + 1e-6


# ---------------------------------------------------------------------------- cloning
@pytest.mark.parametrize("cls", ALGOS)
def test_clone_is_independent(cls: type[DDPG]) -> None:
    agent = make_agent(cls, policy_freq=1)
    twin = agent.clone()
    original = {name: params(getattr(agent, name)) for name in agent.network_names}
    for _ in range(3):
        twin.learn(random_batch())
    twin.mutate_architecture(np.random.default_rng(0), 1.0)
    for name in agent.network_names:
        assert not any(changed(original[name], getattr(agent, name))), name
    twin_params = {id(p) for name in twin.network_names for p in getattr(twin, name).parameters()}
    for optimizer in (twin.actor_optimizer, twin.critic_optimizer):
        assert all(id(p) in twin_params for group in optimizer.param_groups for p in group["params"])
    # Same index: the very same exploration stream; new index: a stream of its own.
    obs = np.zeros((1, 3), np.float32)
    np.testing.assert_array_equal(agent.clone().get_action(obs), agent.clone().get_action(obs))
    other = agent.clone(index=7)
    assert other.index == 7 and other.lineage.parent_id == agent.index
    assert other.exploration.rng is other.rng and other.rng is not agent.rng
    assert not np.array_equal(other.get_action(obs), agent.clone().get_action(obs))


# ---------------------------------------------------------------------------- mutation
@pytest.mark.parametrize("cls", ALGOS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_architecture_mutation_then_learning_updates_every_parameter(cls: type[DDPG], seed: int) -> None:
    agent = make_agent(cls, policy_freq=1, seed=seed)
    rng = np.random.default_rng(seed)
    applied = [agent.mutate_architecture(rng, new_layer_prob=0.5) for _ in range(3)]
    assert all(result is not None for result in applied)
    for result in applied:  # every network repeated the actor's change
        assert set(result["networks"]) == set(agent.network_names), result
    assert agent.actor.config == agent.actor_target.config
    for critic, target in zip(agent.critics, agent.critic_targets, strict=True):
        assert critic.config == target.config
        assert critic.encoder.config == agent.actor.encoder.config
    assert not any(p.requires_grad for _, target in agent.target_pairs() for p in target.parameters())

    before = {name: params(getattr(agent, name)) for name in ("actor", *agent.critic_names)}
    batch = random_batch()
    for _ in range(6):
        agent.learn(batch)
    for name, snapshot in before.items():
        network = getattr(agent, name)
        stale = [pname for (pname, _), moved in zip(network.named_parameters(), changed(snapshot, network),
                                                    strict=True) if not moved]
        assert not stale, f"{name}: parameters not updated after mutation: {stale}"
    for name in ("actor", *agent.critic_names):  # online and target still have matching architectures
        assert getattr(agent, name).config == getattr(agent, f"{name}_target").config


@pytest.mark.parametrize("cls", ALGOS)
def test_architecture_mutation_is_reproducible_and_restarts_targets(cls: type[DDPG]) -> None:
    first, second = make_agent(cls), make_agent(cls)
    for agent in (first, second):
        agent.learn(random_batch())
        rng = np.random.default_rng(11)
        for _ in range(3):
            agent.mutate_architecture(rng, new_layer_prob=0.5)
    for name in first.network_names:
        torch.testing.assert_close(getattr(first, name).state_dict(), getattr(second, name).state_dict())
    for online, target in first.target_pairs():
        torch.testing.assert_close(online.state_dict(), target.state_dict())


@pytest.mark.parametrize("cls", ALGOS)
def test_activation_mutation_and_weight_copy_keep_networks_in_step(cls: type[DDPG]) -> None:
    agent = make_agent(cls)
    result = agent.mutate_activation(np.random.default_rng(3))
    assert result is not None and set(result["networks"]) == set(agent.network_names)
    other = make_agent(cls, seed=5)
    other.mutate_architecture(np.random.default_rng(4), 1.0)
    agent.copy_weights_from(other)
    assert agent.actor.config == other.actor.config == agent.actor_target.config
    assert np.isfinite(agent.learn(random_batch())["critic"])


@pytest.mark.parametrize("cls", ALGOS)
def test_learning_rate_mutation_updates_the_optimizer(cls: type[DDPG]) -> None:
    config = HyperparameterConfig(lr_critic=RLParameter("lr_critic", 1e-5, 1e-1))
    agent = make_agent(cls, hp_config=config, lr_critic=1e-3)
    change = agent.mutate_hyperparameter(np.random.default_rng(0))
    assert change is not None and change["hyperparameter"] == "lr_critic"
    assert change["new"] != 1e-3
    assert agent.critic_optimizer.param_groups[0]["lr"] == pytest.approx(change["new"])
    agent.set_hyperparameter("lr_actor", 0.0123)
    assert agent.actor_optimizer.param_groups[0]["lr"] == 0.0123
    agent.mutate_architecture(np.random.default_rng(1), 1.0)  # rebuilt optimizers keep the rates
    assert agent.actor_optimizer.param_groups[0]["lr"] == 0.0123
    assert agent.critic_optimizer.param_groups[0]["lr"] == pytest.approx(change["new"])
    assert agent.hyperparameters()["lr_actor"] == 0.0123


def test_share_encoders_copies_the_actor_encoder_into_the_critics() -> None:
    agent = make_agent(TD3, share_encoders=True, policy_freq=1)
    for _ in range(2):
        agent.learn(random_batch())
    for critic in agent.critics:
        for a, c in zip(agent.actor.encoder.parameters(), critic.encoder.parameters(), strict=True):
            torch.testing.assert_close(a, c)


# ---------------------------------------------------------------------------- environment, buffer, checkpoint
@pytest.mark.parametrize("cls", ALGOS)
def test_runs_with_a_vector_env_and_replay_buffer(cls: type[DDPG]) -> None:
    env = gym.make_vec("Pendulum-v1", num_envs=2)
    agent = cls(env.single_observation_space, env.single_action_space, net_config=NET, seed=0, batch_size=16,
                vect_noise_dim=2)
    memory = ReplayBuffer(500, env.single_observation_space, env.single_action_space, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        action = agent.get_action(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        memory.add(obs, action, reward, next_obs, terminated, truncated=truncated)
        agent.reset_action_noise(np.logical_or(terminated, truncated))
        obs = next_obs
    losses = agent.learn(memory.sample(16, ))
    assert np.isfinite(losses["critic"])
    fitness = agent.test(env, max_steps=10)
    assert agent.fitness == [fitness] and np.isfinite(fitness) and fitness < 0
    env.close()


@pytest.mark.parametrize("cls", ALGOS)
def test_checkpoint_round_trip(cls: type[DDPG], tmp_path) -> None:
    agent = make_agent(cls, vect_noise_dim=2, policy_freq=1)
    agent.mutate_architecture(np.random.default_rng(0), 1.0)
    for _ in range(2):
        agent.learn(random_batch())
    obs = np.zeros((2, 3), np.float32)
    agent.get_action(obs)
    path = agent.save_checkpoint(tmp_path / "agent")
    restored = cls.load(path)
    assert type(restored) is cls and restored.actor.config == agent.actor.config
    np.testing.assert_array_equal(restored.get_action(obs, training=False), agent.get_action(obs, training=False))
    np.testing.assert_array_equal(restored.exploration.state, agent.exploration.state)
    np.testing.assert_array_equal(restored.get_action(obs), agent.get_action(obs))  # same noise stream
    assert restored.exploration.rng is restored.rng
    for name in agent.critic_names:
        torch.testing.assert_close(getattr(restored, name).state_dict(), getattr(agent, name).state_dict())
