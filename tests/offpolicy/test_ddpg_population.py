"""Population-batched DDPG/TD3 equals the per-agent computation (weights, targets, Adam state,
RNG and noise state), and ``train_off_policy`` runs DDPG/TD3 populations batched."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import agile_offpolicy.training as training_module
from agile_core.networks.stacked import NotStackableError
from agile_offpolicy.buffers import ReplayBuffer
from agile_offpolicy.ddpg import DDPG
from agile_offpolicy.ddpg_population import DDPGGroup
from agile_offpolicy.dqn import DQN
from agile_offpolicy.population import _act, can_batch, make_groups
from agile_offpolicy.td3 import TD3
from agile_offpolicy.training import train_off_policy

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))  # asymmetric bounds
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [32]}, "head_config": {"hidden_size": [16]}}
SETTINGS = [dict(batch_size=16, lr_actor=1e-3, lr_critic=2e-3, gamma=0.99, tau=1e-2, policy_freq=1,
                 policy_noise=0.2, noise_clip=0.5),
            dict(batch_size=24, lr_actor=3e-4, lr_critic=1e-3, gamma=0.9, tau=5e-3, policy_freq=2,
                 policy_noise=0.1, noise_clip=0.15),
            dict(batch_size=8, lr_actor=2e-3, lr_critic=5e-4, gamma=0.95, tau=1.0, policy_freq=3,
                 policy_noise=0.3, noise_clip=0.4)]


def filled_memory(rows: int = 400) -> ReplayBuffer:
    memory = ReplayBuffer(1000, OBS, ACT)
    rng = np.random.default_rng(0)
    memory.add(rng.uniform(-1, 1, (rows, 3)).astype(np.float32),
               rng.uniform(ACT.low, ACT.high, (rows, 2)).astype(np.float32), rng.normal(size=rows).astype(np.float32),
               rng.uniform(-1, 1, (rows, 3)).astype(np.float32), rng.random(rows) < 0.2)
    return memory


def population(cls: type[DDPG], widths: bool = False, **options: object) -> list[DDPG]:
    """Three agents with different hyperparameters; with `widths` they also differ in hidden and
    latent widths and in inserted residual layers (stacked with padding and phantom layers)."""
    agents = []
    for index, hp in enumerate(SETTINGS):
        settings = {key: value for key, value in hp.items() if cls is TD3 or key not in ("policy_noise", "noise_clip")}
        agents.append(cls(OBS, ACT, net_config=NET, seed=index, O_U_noise=index != 1, vect_noise_dim=2,
                          **settings, **options))  # type: ignore[arg-type]
    if widths:
        agents[0].apply_architecture_mutation("encoder.add_node", np.random.default_rng(4), hidden_layer=0,
                                              numb_new_nodes=16)
        agents[1].apply_architecture_mutation("add_latent_node", np.random.default_rng(6), numb_new_nodes=8)
        agents[2].apply_architecture_mutation("head.add_layer", np.random.default_rng(8), hidden_layer=0)
        agents[2].apply_architecture_mutation("head.remove_node", np.random.default_rng(5), hidden_layer=0,
                                              numb_nodes=4)
        for agent in agents:  # open the inserted layers' gates, so they do something
            for online, target in agent.target_pairs():
                for network in (online, target):
                    for block in [*network.encoder.layers, *network.head.layers]:
                        if block.residual:
                            with torch.no_grad():
                                block.gate.fill_(0.5)
    return agents


def assert_same_agents(mine: DDPG, theirs: DDPG) -> None:
    assert mine.learn_counter == theirs.learn_counter
    for name in ("actor", "actor_target", *mine.critic_names, *(f"{c}_target" for c in mine.critic_names)):
        for (key, a), b in zip(getattr(mine, name).named_parameters(), getattr(theirs, name).parameters(),
                               strict=True):
            assert a.shape == b.shape
            assert torch.allclose(a, b, atol=1e-5), f"{name}.{key}: {(a - b).abs().max()}"
    for optimizer in ("actor_optimizer", "critic_optimizer"):
        state_a = getattr(mine, optimizer).state_dict()["state"]
        state_b = getattr(theirs, optimizer).state_dict()["state"]
        assert state_a.keys() == state_b.keys()
        for key in state_b:
            assert float(state_a[key]["step"]) == float(state_b[key]["step"])
            for moment in ("exp_avg", "exp_avg_sq"):
                assert torch.allclose(state_a[key][moment], state_b[key][moment], atol=1e-5, rtol=1e-4)
    # the sampling / smoothing RNG and the noise process advanced identically
    assert mine.rng.bit_generator.state == theirs.rng.bit_generator.state
    np.testing.assert_allclose(getattr(mine.exploration, "state", 0.0), getattr(theirs.exploration, "state", 0.0))


@pytest.mark.parametrize(("cls", "widths", "share"),
                         [(DDPG, False, False), (TD3, False, False), (DDPG, True, False), (TD3, True, False),
                          (TD3, False, True)])
def test_batched_learning_equals_one_by_one_learning(cls: type[DDPG], widths: bool, share: bool) -> None:
    memory = filled_memory()
    batched, reference = population(cls, widths, share_encoders=share), population(cls, widths, share_encoders=share)
    if widths:
        assert len({str(agent.critics[0].config) for agent in batched}) == 3
    for agents in (batched, reference):  # a first step outside the group, so Adam starts from saved state
        for agent in agents:
            agent.learn(memory.sample(agent.batch_size, agent.rng))
    group = DDPGGroup(batched)
    schedule = [(True, True, True), (True, False, True), (False, True, True), (True, True, False),
                (True, True, True), (False, False, True), (True, True, True)]
    for active in schedule:
        losses = group.learn(group.sample(memory, active), active)
        for agent, on, loss in zip(reference, active, losses, strict=True):
            if not on:
                assert loss is None
                continue
            expected = agent.learn(memory.sample(agent.batch_size, agent.rng))
            assert loss is not None and loss.keys() == expected.keys()
            for name, value in expected.items():
                assert loss[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    group.copy_to_members()
    for mine, theirs in zip(batched, reference, strict=True):
        assert_same_agents(mine, theirs)
    # the members train on one by one from where the group left them
    for agents in (batched, reference):
        for agent in agents:
            agent.learn(memory.sample(agent.batch_size, agent.rng))
    for mine, theirs in zip(batched, reference, strict=True):
        assert_same_agents(mine, theirs)


@pytest.mark.parametrize("cls", [DDPG, TD3])
def test_batched_acting_matches_get_action(cls: type[DDPG]) -> None:
    batched, reference = population(cls, widths=True), population(cls, widths=True)
    group = DDPGGroup(batched)
    obs_rng = np.random.default_rng(1)
    for epsilons in ([0.0, 0.5, 1.0], [0.3, 0.0, 0.0], [0.0, 0.0, 0.0]):
        obs = obs_rng.uniform(-1, 1, (3 * 2, 3)).astype(np.float32)
        actions = group.act(obs, epsilons)
        expected = np.concatenate([agent.get_action(obs[2 * i: 2 * i + 2], epsilon=eps)
                                   for i, (agent, eps) in enumerate(zip(reference, epsilons, strict=True))])
        assert actions.shape == (6, 2) and actions.dtype == expected.dtype
        np.testing.assert_allclose(actions, expected, atol=1e-5)
        greedy = np.concatenate([agent.get_action(obs[2 * i: 2 * i + 2], training=False)
                                 for i, agent in enumerate(reference)])
        np.testing.assert_allclose(group.act(obs, epsilons, training=False), greedy, atol=1e-5)
    for mine, theirs in zip(batched, reference, strict=True):
        assert mine.rng.bit_generator.state == theirs.rng.bit_generator.state
        np.testing.assert_allclose(getattr(mine.exploration, "state", 0.0), getattr(theirs.exploration, "state", 0.0))


def test_what_is_batched_and_what_falls_back() -> None:
    memory = filled_memory()
    assert can_batch(population(DDPG, widths=True), memory) and can_batch(population(TD3), memory)
    assert not can_batch([*population(DDPG)[:1], *population(TD3)[:1]], memory)  # one type per population
    with pytest.raises(NotStackableError):
        DDPGGroup([*population(DDPG)[:1], *population(TD3)[:1]])
    assert not can_batch([DDPG(spaces.Dict({"x": OBS}), ACT)], memory)  # multi-input observations
    dqn = DQN(OBS, spaces.Discrete(2))
    assert not can_batch([dqn, *population(DDPG)[:1]], memory) and can_batch([dqn], memory)
    # fewer plain hidden layers: a group of its own; the population still acts as each agent would
    def agents() -> list[DDPG]:
        fewer = TD3(OBS, ACT, net_config={**NET, "encoder_config": {"hidden_size": [32, 32]}}, seed=9,
                    vect_noise_dim=2)
        return [*population(TD3)[:2], fewer, population(TD3)[2]]

    batched, reference = agents(), agents()
    groups = make_groups(batched)
    assert [slots for slots, _ in groups] == [[0, 1, 3], [2]]
    obs = np.random.default_rng(2).uniform(-1, 1, (4 * 2, 3)).astype(np.float32)
    epsilons = [0.2, 0.0, 0.5, 0.0]
    expected = np.concatenate([agent.get_action(obs[2 * i: 2 * i + 2], epsilon=eps)
                               for i, (agent, eps) in enumerate(zip(reference, epsilons, strict=True))])
    np.testing.assert_allclose(_act(groups, obs, epsilons, 2, None, 4), expected, atol=1e-5)


def test_single_agent_trains_the_same_batched_or_not() -> None:
    """One agent (the population env is the env itself): the batched phase takes the same actions,
    noise resets, samples and updates as the one-by-one loop, so the runs agree to float rounding."""
    runs = []
    for batched in (True, False):
        env = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync", max_episode_steps=50)
        agent = TD3(env.single_observation_space, env.single_action_space, net_config=NET, seed=0, batch_size=16,
                    learn_step=2, vect_noise_dim=2, policy_freq=2)
        memory = ReplayBuffer(2000, env.single_observation_space, env.single_action_space, seed=0)
        (agent,), fitness = train_off_policy(env, "Pendulum-v1", "TD3", [agent], memory, max_steps=480, evo_steps=240,
                                             learning_delay=64, eps_decay=0.99, verbose=False, seed=1,
                                             batch_population=batched)
        runs.append((agent, fitness))
        env.close()
    (batched_agent, batched_fitness), (agent, fitness) = runs
    assert batched_agent.steps == agent.steps == 480
    assert batched_agent.learn_counter == agent.learn_counter > 100
    assert batched_agent.scores == pytest.approx(agent.scores, rel=1e-4)
    assert batched_fitness == pytest.approx(fitness, rel=1e-3)
    for p, q in zip(batched_agent.actor.parameters(), agent.actor.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=0)


@pytest.mark.parametrize("cls", [DDPG, TD3])
def test_train_off_policy_batches_a_pendulum_population(cls: type[DDPG], monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    phase = training_module.collect_and_learn_population

    def counting(agents, env, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((len(agents), env.num_envs))
        return phase(agents, env, *args, **kwargs)

    monkeypatch.setattr(training_module, "collect_and_learn_population", counting)
    env = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    pop = [cls(env.single_observation_space, env.single_action_space, index=i, net_config=NET, seed=i,
               batch_size=batch_size, learn_step=2, vect_noise_dim=2, O_U_noise=i == 0)
           for i, batch_size in enumerate([32, 16, 64])]
    before = [[p.detach().clone() for p in agent.actor.parameters()] for agent in pop]
    memory = ReplayBuffer(4000, env.single_observation_space, env.single_action_space, seed=0)
    pop, fitnesses = train_off_policy(env, "Pendulum-v1", cls.__name__, pop, memory, max_steps=400, evo_steps=200,
                                      learning_delay=100, verbose=False, seed=0)
    env.close()
    assert calls and all(call == (3, 6) for call in calls)
    assert len(fitnesses) == 3 and all(np.isfinite(fitnesses))
    assert all(len(agent.fitness) == 2 and agent.steps == 400 for agent in pop)
    assert all(agent.learn_counter > 100 for agent in pop)
    for agent, old in zip(pop, before, strict=True):
        assert any(not torch.equal(a, b) for a, b in zip(agent.actor.parameters(), old, strict=True))
