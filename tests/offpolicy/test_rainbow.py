"""Unit tests of the RainbowDQN agent: C51 projection, noisy exploration, the distributional
n-step/double-Q target, PER weights and priorities, target network, mutation and checkpoints."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import agile_offpolicy.rainbow as rainbow_module
from agile_core.algorithms.spaces import UnsupportedSpaceError
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_core.networks import NoisyLinear
from agile_offpolicy.buffers import NStepBatch, PrioritizedBatch, ReplayBatch
from agile_offpolicy.population import ReplayPopulationBatch
from agile_offpolicy.rainbow import RainbowDQN, project_distribution

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = spaces.Discrete(3)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


def make_agent(**kwargs) -> RainbowDQN:
    options = {"net_config": NET, "seed": 0, "batch_size": 16, "lr": 1e-3, "num_atoms": 11, "v_min": -5.0,
               "v_max": 5.0}
    options.update(kwargs)
    return RainbowDQN(OBS, ACT, **options)


def random_batch(n: int = 32, seed: int = 0, terminal: float = 0.3) -> ReplayBatch:
    rng = np.random.default_rng(seed)
    return ReplayBatch(
        torch.as_tensor(rng.uniform(-1, 1, (n, 4)).astype(np.float32)),
        torch.as_tensor(rng.integers(0, 3, n)),
        torch.as_tensor(rng.normal(size=n).astype(np.float32)),
        torch.as_tensor(rng.uniform(-1, 1, (n, 4)).astype(np.float32)),
        torch.as_tensor((rng.random(n) < terminal).astype(np.float32)),
        np.arange(n),
    )


def n_step_view(batch: ReplayBatch, n_steps: list[int] | np.ndarray, seed: int = 1) -> NStepBatch:
    rng = np.random.default_rng(seed)
    n = len(batch.indices)
    return NStepBatch(batch.obs, batch.action, torch.as_tensor(rng.normal(size=n).astype(np.float32)),
                      torch.as_tensor(rng.uniform(-1, 1, (n, 4)).astype(np.float32)), batch.done,
                      torch.as_tensor(np.asarray(n_steps, dtype=np.int64)), batch.indices)


def per_sample(agent: RainbowDQN, batch: Any) -> torch.Tensor:
    """The per-transition losses ``[B]`` of a flat batch (the ``P = 1`` rows of the learning step's loss)."""
    group = agent.solo_group()
    return RainbowDQN._distribution_loss(group, ReplayPopulationBatch.of_one(batch, agent.device))[0]


def noise_of(network: torch.nn.Module) -> list[torch.Tensor]:
    return [buf.detach().clone() for m in network.modules() if isinstance(m, NoisyLinear)
            for buf in (m.eps_in, m.eps_out)]


# ---------------------------------------------------------------------------- C51 projection
def test_projection_matches_a_hand_computed_case() -> None:
    support = torch.linspace(0.0, 4.0, 5)  # atoms 0, 1, 2, 3, 4 (delta 1)
    probs = torch.tensor([
        [0.0, 0.5, 0.5, 0.0, 0.0],  # r=0.5, d=1: mass at 1.5 and 2.5 splits half-half
        [0.2, 0.2, 0.2, 0.2, 0.2],  # terminated (d=0), r=2.3: 0.7 on atom 2, 0.3 on atom 3
        [0.2, 0.2, 0.2, 0.2, 0.2],  # d=0, r=1 exactly on an atom: all of it there
        [0.2, 0.2, 0.2, 0.2, 0.2],  # r=10 clips every atom to v_max
        [0.0, 0.5, 0.0, 0.0, 0.5],  # r=0, d=0.5: 1 -> 0.5 (split 0/1), 4 -> 2 (atom 2)
        [0.1, 0.2, 0.3, 0.4, 0.0],  # r=-1, d=0.5: 0 -> -1 clips to 0, 1 -> -0.5 -> 0, 2 -> 0, 3 -> 0.5
    ])
    rewards = torch.tensor([0.5, 2.3, 1.0, 10.0, 0.0, -1.0])
    discounts = torch.tensor([1.0, 0.0, 0.0, 0.5, 0.5, 0.5])
    expected = torch.tensor([
        [0.0, 0.25, 0.5, 0.25, 0.0],
        [0.0, 0.0, 0.7, 0.3, 0.0],
        [0.0, 1.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 1.0],
        [0.25, 0.25, 0.5, 0.0, 0.0],
        [0.8, 0.2, 0.0, 0.0, 0.0],
    ])
    projected = project_distribution(probs, rewards, discounts, support)
    torch.testing.assert_close(projected, expected)
    torch.testing.assert_close(projected.sum(-1), torch.ones(6))


def test_projection_of_a_random_distribution_keeps_mass_and_mean() -> None:
    """Inside the support the projection preserves the mean: E = r + d * E[Z]."""
    support = torch.linspace(-10.0, 10.0, 51)
    probs = torch.softmax(torch.randn(64, 51, generator=torch.Generator().manual_seed(0)), -1)
    probs[:, :10] = 0.0  # keep r + d * z inside [-10, 10]: z >= -6 and d <= 0.5, |r| <= 1
    probs[:, -10:] = 0.0
    probs /= probs.sum(-1, keepdim=True)
    rewards = torch.rand(64) * 2 - 1
    discounts = torch.rand(64) * 0.5
    projected = project_distribution(probs, rewards, discounts, support)
    torch.testing.assert_close(projected.sum(-1), torch.ones(64))
    torch.testing.assert_close((projected * support).sum(-1), rewards + discounts * (probs * support).sum(-1),
                               atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------- construction
def test_rejects_non_discrete_actions_and_bad_hyperparameters() -> None:
    with pytest.raises(UnsupportedSpaceError, match="RainbowDQN does not support action space Box"):
        RainbowDQN(OBS, spaces.Box(-1, 1, (2,)))
    for bad in ({"beta": 1.5}, {"prior_eps": 0.0}, {"n_step": 0}, {"noise_std": -1.0}, {"tau": 0.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            make_agent(**bad)
    with pytest.raises(ValueError, match="v_min"):
        make_agent(v_min=5.0, v_max=5.0)
    with pytest.raises(ValueError, match="recurrent"):
        RainbowDQN(OBS, ACT, net_config={"encoder_config": {"arch": "lstm"}})


def test_hyperparameter_defaults_names_and_fixed_ones() -> None:
    agent = RainbowDQN(OBS, ACT, net_config=NET)
    assert agent.hyperparameters() == {"lr": 1e-4, "batch_size": 64, "learn_step": 5, "gamma": 0.99,
                                       "tau": 1e-3, "beta": 0.4, "prior_eps": 1e-6}
    assert (agent.num_atoms, agent.v_min, agent.v_max, agent.noise_std, agent.n_step, agent.combined_reward) == (
        51, -10.0, 10.0, 0.5, 3, False)
    with pytest.raises(ValueError, match="num_atoms"):
        make_agent(hp_config=HyperparameterConfig(num_atoms=RLParameter("num_atoms", 11, 101, int)))
    with pytest.raises(ValueError, match="v_max"):
        agent.set_hyperparameter("v_max", 20.0)


def test_dict_observations_and_action_start_offset() -> None:
    dict_space = spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)})
    agent = RainbowDQN(dict_space, spaces.Discrete(2, start=5), num_atoms=5)
    obs = {"a": np.zeros((3, 2), np.float32), "b": np.array([0, 2, 1])}
    actions = agent.get_action(obs)
    assert actions.shape == (3,) and actions.dtype == np.int64 and set(actions) <= {5, 6}
    batch = ReplayBatch(obs, torch.as_tensor(actions), torch.ones(3), obs, torch.zeros(3), np.arange(3))
    loss, priorities = agent.learn(batch)
    assert np.isfinite(loss) and priorities.shape == (3,)


def test_actor_network_is_cloned_and_checked() -> None:
    from agile_core.networks import RainbowQNetwork

    network = RainbowQNetwork(OBS, ACT, NET, num_atoms=11, v_min=-5, v_max=5)
    agent = make_agent(actor_network=network)
    assert agent.actor is not network and agent.actor.config == network.config
    with pytest.raises(ValueError, match="num_atoms=51"):
        RainbowDQN(OBS, ACT, actor_network=network)


# ---------------------------------------------------------------------------- acting and noise
def test_greedy_actions_use_the_mean_weights_and_noisy_ones_the_noise() -> None:
    agent = make_agent(noise_std=5.0)
    obs = np.random.default_rng(0).uniform(-1, 1, (200, 4)).astype(np.float32)
    with torch.no_grad():
        agent.actor.eval()
        mean_greedy = agent.actor(torch.as_tensor(obs), "q").argmax(-1).numpy()
        agent.actor.train()
        noisy_greedy = agent.actor(torch.as_tensor(obs), "q").argmax(-1).numpy()
    np.testing.assert_array_equal(agent.get_action(obs, training=False), mean_greedy)
    np.testing.assert_array_equal(agent.get_action(obs, epsilon=1.0), noisy_greedy)  # epsilon is ignored
    assert not np.array_equal(mean_greedy, noisy_greedy)
    assert agent.actor.training  # acting greedily does not leave the network in eval mode


def test_action_mask_restricts_the_choice() -> None:
    agent = make_agent()
    obs = np.zeros((4, 4), np.float32)
    mask = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 1, 1]], dtype=bool)
    actions = agent.get_action(obs, action_mask=mask)
    assert mask[np.arange(4), actions].all()
    with pytest.raises(ValueError, match="no allowed action"):
        agent.get_action(obs, action_mask=np.zeros((4, 3), bool))


def test_learning_redraws_the_noise_of_both_networks_independently() -> None:
    agent = make_agent()
    actor_noise, target_noise = noise_of(agent.actor), noise_of(agent.actor_target)
    assert len(actor_noise) == 4  # the value and advantage output layers, eps_in and eps_out each
    assert not all(torch.equal(a, b) for a, b in zip(actor_noise, target_noise, strict=True))
    agent.learn(random_batch())
    new_actor, new_target = noise_of(agent.actor), noise_of(agent.actor_target)
    assert not any(torch.equal(a, b) for a, b in zip(actor_noise, new_actor, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(target_noise, new_target, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(new_actor, new_target, strict=True))


def test_seeded_agents_draw_the_same_noise() -> None:
    first, second = make_agent(seed=3), make_agent(seed=3)
    for agent in (first, second):
        agent.learn(random_batch())
    for a, b in zip(noise_of(first.actor) + noise_of(first.actor_target),
                    noise_of(second.actor) + noise_of(second.actor_target), strict=True):
        torch.testing.assert_close(a, b)


# ---------------------------------------------------------------------------- learning
def test_target_network_is_frozen_and_moves_by_tau() -> None:
    agent = make_agent(tau=0.25)
    assert not any(p.requires_grad for p in agent.actor_target.parameters())
    target_before = [p.detach().clone() for p in agent.actor_target.parameters()]
    agent.learn(random_batch())
    for online, target, old in zip(agent.actor.parameters(), agent.actor_target.parameters(), target_before,
                                   strict=True):
        torch.testing.assert_close(target, old + 0.25 * (online.detach() - old))
        assert target.grad is None


def test_learn_reduces_the_distributional_loss_on_a_fixed_batch() -> None:
    agent = make_agent(lr=3e-3)
    batch = random_batch(terminal=1.0)  # fixed targets: the rewards themselves
    losses = [agent.learn(batch)[0] for _ in range(150)]
    assert losses[-1] < 0.7 * losses[0]


def test_bootstrap_discount_is_gamma_to_the_n_steps_and_zero_at_termination(monkeypatch) -> None:
    agent = make_agent(gamma=0.9)
    seen: list[torch.Tensor] = []

    def spy(next_probs, rewards, discounts, support):
        seen.append(discounts.clone())
        return project_distribution(next_probs, rewards, discounts, support)

    monkeypatch.setattr(rainbow_module, "project_distribution", spy)
    batch = random_batch(4)._replace(done=torch.tensor([0.0, 0.0, 0.0, 1.0]))
    per_sample(agent, n_step_view(batch, [1, 2, 3, 3]))
    per_sample(agent, batch)
    torch.testing.assert_close(seen[0], torch.tensor([[0.9, 0.81, 0.729, 0.0]]))
    torch.testing.assert_close(seen[1], torch.tensor([[0.9, 0.9, 0.9, 0.0]]))


def test_target_uses_double_q_action_selection() -> None:
    """The online network picks the next action; the target network's distribution for it is used."""
    agent = make_agent()
    batch = random_batch(8)
    next_obs = batch.next_obs
    with torch.no_grad():
        chosen = agent.actor(next_obs, "q").argmax(-1)
        target_probs = agent.actor_target(next_obs, "probs")[torch.arange(8), chosen]
    rewards, discounts = torch.zeros(8), torch.ones(8)
    expected = project_distribution(target_probs, rewards, discounts, agent.actor.support)
    torch.testing.assert_close(agent.target_distribution(rewards, next_obs, discounts), expected)


def test_priorities_are_the_per_sample_losses_and_weights_scale_the_loss() -> None:
    agent = make_agent()
    batch = random_batch(16)
    weights = torch.linspace(0.1, 1.0, 16)
    per = PrioritizedBatch(*batch[:5], weights, batch.indices)
    with torch.no_grad():
        losses = per_sample(agent, batch)
    loss, priorities = agent.learn(per)
    np.testing.assert_allclose(priorities, losses.numpy() + agent.prior_eps, rtol=1e-5)
    assert loss == pytest.approx(float((losses * weights).mean()), rel=1e-5)


@pytest.mark.parametrize("combined", [False, True])
def test_n_step_loss_replaces_or_joins_the_one_step_loss(combined: bool) -> None:
    agent = make_agent(combined_reward=combined)
    batch = random_batch(16)
    n_batch = n_step_view(batch, np.full(16, 3))
    with torch.no_grad():
        one_step, n_step = per_sample(agent, batch), per_sample(agent, n_batch)
    _, priorities = agent.learn(batch, n_experiences=n_batch)
    expected = n_step + one_step if combined else n_step
    np.testing.assert_allclose(priorities, expected.numpy() + agent.prior_eps, rtol=1e-5)


# ---------------------------------------------------------------------------- clone, mutation, checkpoints
def test_clone_is_independent_and_explores_with_its_own_stream() -> None:
    agent = make_agent()
    twin = agent.clone(index=4)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    twin.learn(random_batch())
    for param, old in zip(agent.actor.parameters(), before, strict=True):
        torch.testing.assert_close(param, old)
    agent.learn(random_batch())
    assert not all(torch.equal(a, b) for a, b in zip(noise_of(agent.actor), noise_of(twin.actor), strict=True))


@pytest.mark.parametrize("new_layer_prob", [1.0, 0.0])
def test_architecture_mutation_keeps_online_and_target_in_step(new_layer_prob: float) -> None:
    agent = make_agent(hp_config=HyperparameterConfig(beta=RLParameter("beta", 0.2, 0.8)))
    rng = np.random.default_rng(0)
    for _ in range(3):
        agent.mutate_architecture(rng, new_layer_prob)
        assert agent.actor_target.config == agent.actor.config
    assert not any(p.requires_grad for p in agent.actor_target.parameters())
    assert agent.mutate_hyperparameter(rng)["hyperparameter"] == "beta"
    optimised = {id(p) for group in agent.optimizer.param_groups for p in group["params"]}
    assert optimised == {id(p) for p in agent.actor.parameters()}
    before = {name: p.detach().clone() for name, p in agent.actor.named_parameters()}
    for seed in range(3):
        loss, _ = agent.learn(random_batch(seed=seed))
        assert np.isfinite(loss)
    assert all(not torch.equal(p, before[name]) for name, p in agent.actor.named_parameters())


def test_architecture_mutation_is_reproducible() -> None:
    def mutated() -> RainbowDQN:
        agent = make_agent()
        agent.mutate_architecture(np.random.default_rng(5), new_layer_prob=1.0)
        return agent

    first, second = mutated(), mutated()
    for name in ("actor", "actor_target"):
        for a, b in zip(getattr(first, name).state_dict().values(), getattr(second, name).state_dict().values(),
                        strict=True):
            torch.testing.assert_close(a, b)


def test_checkpoint_round_trip_after_mutation(tmp_path) -> None:
    agent = make_agent(hp_config=HyperparameterConfig(lr=RLParameter("lr", 1e-4, 1e-2)), combined_reward=True)
    agent.mutate_architecture(np.random.default_rng(1), new_layer_prob=1.0)
    agent.set_hyperparameter("lr", 2e-3)
    agent.learn(random_batch())
    restored = RainbowDQN.load(agent.save_checkpoint(tmp_path / "rainbow"))
    assert isinstance(restored, RainbowDQN) and restored.hyperparameters() == agent.hyperparameters()
    assert (restored.num_atoms, restored.v_min, restored.v_max, restored.combined_reward) == (11, -5.0, 5.0, True)
    assert restored.actor.config == agent.actor.config == restored.actor_target.config
    for a, b in zip(noise_of(restored.actor_target), noise_of(agent.actor_target), strict=True):
        torch.testing.assert_close(a, b)
    obs = np.random.default_rng(0).uniform(-1, 1, (50, 4)).astype(np.float32)
    np.testing.assert_array_equal(restored.get_action(obs), agent.get_action(obs))
    first, second = restored.learn(random_batch(seed=3)), agent.learn(random_batch(seed=3))
    assert first[0] == pytest.approx(second[0]) and np.allclose(first[1], second[1])


def test_test_appends_the_mean_greedy_return() -> None:
    env = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point")
    agent = RainbowDQN(env.single_observation_space, env.single_action_space, net_config=NET, seed=0)
    score = agent.test(env, loop=2)
    assert agent.fitness == [score] and score > 0
    assert agent.test(env, max_steps=5) <= 5.0
