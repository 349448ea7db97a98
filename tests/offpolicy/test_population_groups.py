"""Each off-policy algorithm is written once, over a leading member axis: a single agent's
``learn`` (``P = 1``) equals a plain per-agent oracle, and a group of ``P`` members equals ``P``
single agents (weights, targets, Adam state, learn counters, RNG and noise state)."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import agile_offpolicy.training as training_module
from agile_core.algorithms.group import MemberGroup, StaleGroupError
from agile_core.networks.stacked import NotStackableError
from agile_core.training.population import act_groups as _act
from agile_offpolicy.buffers import ReplayBuffer
from agile_offpolicy.ddpg import DDPG
from agile_offpolicy.dqn import DQN
from agile_offpolicy.population import can_batch, make_groups, sample_padded
from agile_offpolicy.td3 import TD3
from agile_offpolicy.training import train_off_policy
from tests.offpolicy.oracles import ddpg_learn, dqn_learn

DQN_OBS, DQN_ACT = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(3)
BOX_OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX_ACT = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))  # asymmetric bounds
DQN_NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [32, 32]}, "head_config": {"hidden_size": [16]}}
BOX_NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [32]}, "head_config": {"hidden_size": [16]}}
DQN_SETTINGS = [dict(lr=1e-3, batch_size=16, gamma=0.99, tau=1e-2), dict(lr=3e-3, batch_size=24, gamma=0.9, tau=5e-3),
                dict(lr=5e-4, batch_size=8, gamma=0.95, tau=1.0)]
BOX_SETTINGS = [dict(batch_size=16, lr_actor=1e-3, lr_critic=2e-3, gamma=0.99, tau=1e-2, policy_freq=1),
                dict(batch_size=24, lr_actor=3e-4, lr_critic=1e-3, gamma=0.9, tau=5e-3, policy_freq=2),
                dict(batch_size=8, lr_actor=2e-3, lr_critic=5e-4, gamma=0.95, tau=1.0, policy_freq=3)]
TD3_EXTRA = [dict(policy_noise=0.2, noise_clip=0.5), dict(policy_noise=0.1, noise_clip=0.15),
             dict(policy_noise=0.3, noise_clip=0.4)]
# idle members inside, at the start and at the end of the population
SCHEDULE = [(True, True, True), (True, False, True), (False, True, True), (True, True, False), (True, True, True),
            (False, False, True), (True, True, True)]


def memory_for(obs_space: spaces.Box, action_space: spaces.Space, rows: int = 500) -> ReplayBuffer:
    memory = ReplayBuffer(1000, obs_space, action_space)
    rng = np.random.default_rng(0)
    shape = obs_space.shape
    if isinstance(action_space, spaces.Discrete):
        actions = rng.integers(0, int(action_space.n), rows)
    else:
        actions = rng.uniform(action_space.low, action_space.high, (rows, *action_space.shape)).astype(np.float32)
    memory.add(rng.uniform(-1, 1, (rows, *shape)).astype(np.float32), actions, rng.normal(size=rows).astype(np.float32),
               rng.uniform(-1, 1, (rows, *shape)).astype(np.float32), rng.random(rows) < 0.2)
    return memory


def open_gates(networks: list[Any]) -> None:
    """Open inserted residual layers' gates, so that they do something."""
    for network in networks:
        for block in [*network.encoder.layers, *network.head.layers]:
            if block.residual:
                with torch.no_grad():
                    block.gate.fill_(0.5)


class HuberDQN(DQN):
    """DQN with the Huber loss and gradient clipping (the hyperparameters' other setting)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, loss="huber", max_grad_norm=10.0, **kwargs)


def dqns(double: bool = True, widths: bool = False, cls: type[DQN] = DQN, activations: bool = False) -> list[DQN]:
    agents = [cls(DQN_OBS, DQN_ACT, net_config=DQN_NET, seed=i, double=double, **hp) for i, hp in enumerate(DQN_SETTINGS)]
    for agent in agents:  # an inserted residual layer in every member
        agent.apply_architecture_mutation("encoder.add_layer", np.random.default_rng(3), hidden_layer=0)
    if activations:  # mutated hidden activations: members 1 and 2 differ from member 0 and each other
        agents[1].apply_architecture_mutation("encoder.change_activation", activation="Tanh")
        agents[2].apply_architecture_mutation("head.change_activation", activation="GELU")
        agents[2].apply_architecture_mutation("encoder.change_activation", activation="Tanh")
    if widths:  # padded widths and inserted residual layers (phantoms) in one group
        agents[0].apply_architecture_mutation("encoder.add_node", np.random.default_rng(4), hidden_layer=1,
                                              numb_new_nodes=16)
        agents[1].apply_architecture_mutation("head.remove_node", np.random.default_rng(5), hidden_layer=0,
                                              numb_nodes=8)
        agents[2].apply_architecture_mutation("add_latent_node", np.random.default_rng(6))
        agents[1].apply_architecture_mutation("encoder.add_layer", np.random.default_rng(7), hidden_layer=2)
        agents[2].apply_architecture_mutation("head.add_layer", np.random.default_rng(8), hidden_layer=0)
        open_gates([net for agent in agents for net in (agent.actor, agent.actor_target)])
    return agents


def box_agents(cls: type[DDPG], widths: bool = False, **options: Any) -> list[DDPG]:
    agents = []
    for index, hp in enumerate(BOX_SETTINGS):
        extra = TD3_EXTRA[index] if cls is TD3 else {}
        agents.append(cls(BOX_OBS, BOX_ACT, net_config=BOX_NET, seed=index, O_U_noise=index != 1, vect_noise_dim=2,
                          **hp, **extra, **options))
    if widths:  # hidden widths and inserted layers differ; the critics' latent width may not
        agents[0].apply_architecture_mutation("encoder.add_node", np.random.default_rng(4), hidden_layer=0,
                                              numb_new_nodes=16)
        agents[2].apply_architecture_mutation("head.add_layer", np.random.default_rng(8), hidden_layer=0)
        agents[2].apply_architecture_mutation("head.remove_node", np.random.default_rng(5), hidden_layer=0,
                                              numb_nodes=4)
        open_gates([net for agent in agents for pair in agent.target_pairs() for net in pair])
    return agents


def assert_same(mine: Any, theirs: Any) -> None:
    """Same weights of every network, Adam states, learn counter, RNG and noise state."""
    assert mine.learn_counter == theirs.learn_counter
    for name in mine.network_names:
        for (key, a), b in zip(getattr(mine, name).named_parameters(), getattr(theirs, name).parameters(), strict=True):
            assert a.shape == b.shape
            assert torch.allclose(a, b, atol=1e-5), f"{name}.{key}: {(a - b).abs().max()}"
    for slot in mine._optimizers:
        state_a, state_b = (getattr(agent, slot.attr).state_dict()["state"] for agent in (mine, theirs))
        for key in state_b:
            assert float(state_a[key]["step"]) == float(state_b[key]["step"])
            for moment in ("exp_avg", "exp_avg_sq"):
                assert torch.allclose(state_a[key][moment], state_b[key][moment], atol=1e-5, rtol=1e-4), moment
    assert mine.rng.bit_generator.state == theirs.rng.bit_generator.state
    np.testing.assert_allclose(getattr(getattr(mine, "exploration", None), "state", 0.0),
                               getattr(getattr(theirs, "exploration", None), "state", 0.0))


def same_losses(loss: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert loss.keys() == expected.keys()
        for name, value in expected.items():
            assert loss[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    else:
        assert loss == pytest.approx(expected, rel=1e-4, abs=1e-6)


# ---------------------------------------------------------------------------- P = 1 vs the oracles
@pytest.mark.parametrize("case", ["dqn", "dqn_vanilla", "dqn_huber", "ddpg", "td3", "td3_shared"])
def test_single_agent_learning_equals_the_per_agent_oracle(case: str) -> None:
    if case.startswith("dqn"):
        agent, oracle_step = dqns(double=case != "dqn_vanilla", cls=HuberDQN if case == "dqn_huber" else DQN)[1], dqn_learn
        memory = memory_for(DQN_OBS, DQN_ACT)
    else:
        cls = DDPG if case == "ddpg" else TD3
        agent, oracle_step = box_agents(cls, share_encoders=case == "td3_shared")[2], ddpg_learn
        memory = memory_for(BOX_OBS, BOX_ACT)
    oracle = copy.deepcopy(agent)
    for _ in range(7):
        loss = agent.learn(memory.sample(agent.batch_size, agent.rng))
        same_losses(loss, oracle_step(oracle, memory.sample(oracle.batch_size, oracle.rng)))  # type: ignore[arg-type]
    assert_same(agent, oracle)


def test_unstackable_networks_learn_alone_through_the_same_step() -> None:
    """Image observations (a CNN encoder) do not stack, yet a single agent runs the same step."""
    space = spaces.Box(0, 255, (3, 16, 16), np.uint8)
    net = {"latent_dim": 16, "encoder_config": {"channel_size": [8], "kernel_size": [3], "stride_size": [2]},
           "head_config": {"hidden_size": [16]}}
    agent = DQN(space, DQN_ACT, net_config=net, seed=0, batch_size=8)
    with pytest.raises(NotStackableError):
        MemberGroup([agent, copy.deepcopy(agent)])
    assert not agent.solo_group().stacked
    oracle = copy.deepcopy(agent)
    rng = np.random.default_rng(1)
    for _ in range(3):
        batch = (rng.integers(0, 255, (8, 3, 16, 16), np.uint8), rng.integers(0, 3, 8), rng.normal(size=8),
                 rng.integers(0, 255, (8, 3, 16, 16), np.uint8), rng.random(8) < 0.3)
        assert agent.learn(batch) == pytest.approx(dqn_learn(oracle, batch), rel=1e-4, abs=1e-6)
    assert_same(agent, oracle)


# ---------------------------------------------------------------------------- P = 3 vs three P = 1
@pytest.mark.parametrize(("case", "widths", "fused"),
                         [("dqn", False, True), ("dqn", True, True), ("dqn", True, False), ("dqn_vanilla", False, True),
                          ("dqn_huber", True, True), ("dqn_activations", True, True), ("dqn_activations", False, False),
                          ("ddpg", False, True), ("ddpg", True, True), ("td3", False, True), ("td3", True, True),
                          ("td3", True, False), ("td3_shared", False, True)])
def test_group_learning_equals_single_agents(case: str, widths: bool, fused: bool) -> None:
    if case.startswith("dqn"):
        def build() -> list[Any]:
            return dqns(double=case != "dqn_vanilla", widths=widths, cls=HuberDQN if case == "dqn_huber" else DQN,
                        activations=case == "dqn_activations")
        memory = memory_for(DQN_OBS, DQN_ACT)
    else:
        cls = DDPG if case == "ddpg" else TD3

        def build() -> list[Any]:
            return box_agents(cls, widths, share_encoders=case == "td3_shared")
        memory = memory_for(BOX_OBS, BOX_ACT)
    batched, single = build(), build()
    for agents in (batched, single):  # a first step alone, so the group starts from saved Adam state
        for agent in agents:
            agent.learn(memory.sample(agent.batch_size, agent.rng))
    group = MemberGroup(batched, fused=fused)
    assert group.stacked
    assert (len(group.select([False, True, True])) == 2) == (case.startswith("dqn") or case == "ddpg")
    for active in SCHEDULE:  # partial rounds run on the smallest member range, as the loop runs them
        view = group.select(active)
        part = list(active[view.offset:view.offset + len(view)])
        losses = [None] * view.offset + group.algorithm.learn_population(
            view, sample_padded(memory, view.members, part, "cpu"), part)
        losses += [None] * (len(active) - len(losses))
        for agent, on, loss in zip(single, active, losses, strict=True):
            if on:
                same_losses(loss, agent.learn(memory.sample(agent.batch_size, agent.rng)))
            else:
                assert loss is None
    for mine, theirs in zip(batched, single, strict=True):
        assert_same(mine, theirs)
    for agents in (batched, single):  # and they go on alone from where the group left them
        for agent in agents:
            agent.learn(memory.sample(agent.batch_size, agent.rng))
    for mine, theirs in zip(batched, single, strict=True):
        assert_same(mine, theirs)


@pytest.mark.parametrize("case", ["dqn", "dqn_activations", "ddpg", "td3"])
def test_group_acting_equals_single_agents(case: str) -> None:
    mixed = case == "dqn_activations"
    batched, single = (dqns(activations=mixed), dqns(activations=mixed)) if case.startswith("dqn") else \
        (box_agents(DDPG if case == "ddpg" else TD3), box_agents(DDPG if case == "ddpg" else TD3))
    dim = 4 if case.startswith("dqn") else 3
    obs = np.random.default_rng(1).uniform(-1, 1, (3 * 2, dim)).astype(np.float32)
    epsilons = [0.0, 0.5, 1.0]
    for agent, learn_step in zip(batched + single, (8, 2, 4) * 2, strict=True):
        agent.learn_step = learn_step
    groups = make_groups(batched)
    assert [slots for slots, _ in groups] == [[1, 2, 0]]  # the busiest learners first
    actions = _act(groups, obs, epsilons, 2, None, 3)
    expected = np.concatenate([agent.get_action(obs[2 * i: 2 * i + 2], epsilon=eps)
                               for i, (agent, eps) in enumerate(zip(single, epsilons, strict=True))])
    np.testing.assert_allclose(actions, expected, rtol=1e-6)
    greedy = _act(groups, obs, epsilons, 2, None, 3, training=False)
    expected = np.concatenate([agent.get_action(obs[2 * i: 2 * i + 2], **({"epsilon": 0.0} if case.startswith("dqn")
                                                                         else {"training": False}))
                               for i, agent in enumerate(single)])
    np.testing.assert_allclose(greedy, expected, rtol=1e-6)


# ---------------------------------------------------------------------------- grouping rules
def test_what_groups_together() -> None:
    agents = dqns(widths=True)
    fewer = DQN(DQN_OBS, DQN_ACT, net_config={**DQN_NET, "encoder_config": {"hidden_size": [32]}})
    with pytest.raises(NotStackableError):
        MemberGroup([*agents, fewer])
    assert [slots for slots, _ in make_groups([*agents, fewer])] == [[0, 1, 2], [3]]
    critics = box_agents(TD3)
    critics[1].apply_architecture_mutation("add_latent_node", np.random.default_rng(6), numb_new_nodes=8)
    assert [slots for slots, _ in make_groups(critics)] == [[0, 2], [1]]  # critics stack with one latent width
    with pytest.raises(NotStackableError):
        MemberGroup([dqns()[0], box_agents(DDPG)[0]])
    mixed = dqns(activations=True)  # a mutated hidden activation does not split the population
    assert [slots for slots, _ in make_groups(mixed)] == [[0, 1, 2]]


@pytest.mark.parametrize("fused", [True, False])
def test_a_group_with_mixed_activations_computes_each_members_q_values(fused: bool) -> None:
    agents = dqns(widths=True, activations=True)
    group = MemberGroup(agents, fused=fused)
    obs = torch.as_tensor(np.random.default_rng(2).uniform(-1, 1, (3, 5, 4)).astype(np.float32))
    with torch.no_grad():
        stacked = group.nets["actor"](obs)
        for index, agent in enumerate(agents):
            torch.testing.assert_close(stacked[index], agent.actor(obs[index]), rtol=1e-5, atol=1e-6)
            part = group.select([index == other for other in range(3)])  # a member range alone
            torch.testing.assert_close(part.nets["actor"](obs[index:index + 1])[0], agent.actor(obs[index]),
                                       rtol=1e-5, atol=1e-6)


def test_subclasses_batch_unless_they_override_learn() -> None:
    class Tweaked(DQN):
        def population_key(self) -> str:
            return super().population_key()

    class OwnLearn(DQN):
        def learn(self, experiences: Any) -> float:
            return 0.0

    class Wrapped(DQN):
        def learn(self, experiences: Any) -> float:
            return super().learn(experiences) * 1.0

    memory = ReplayBuffer(10, DQN_OBS, DQN_ACT)
    assert can_batch([Tweaked(DQN_OBS, DQN_ACT), Tweaked(DQN_OBS, DQN_ACT)], memory)
    assert not can_batch([OwnLearn(DQN_OBS, DQN_ACT)], memory)
    wrapped = Wrapped(DQN_OBS, DQN_ACT, batch_size=8)  # its own learn still runs the shared step
    assert not can_batch([wrapped], memory)
    filled = memory_for(DQN_OBS, DQN_ACT)
    assert np.isfinite(wrapped.learn(filled.sample(8, wrapped.rng)))


def test_members_share_weights_with_their_group_and_a_changed_member_makes_it_stale() -> None:
    agents = dqns()
    memory = memory_for(DQN_OBS, DQN_ACT)
    group = MemberGroup(agents)
    before = agents[0].actor.head.output_layer.weight.detach().clone()
    DQN.learn_population(group, sample_padded(memory, agents, [True] * 3, "cpu"), [True] * 3)
    assert not torch.equal(agents[0].actor.head.output_layer.weight, before)  # no copy back needed
    assert group.is_current()
    agents[1].apply_architecture_mutation("encoder.add_node", np.random.default_rng(0), hidden_layer=0)
    assert not group.is_current()
    with pytest.raises(StaleGroupError):
        group.check_current()
    fresh = dqns()
    group = MemberGroup(fresh)
    fresh[2].learn(memory.sample(8, fresh[2].rng))  # a group of one takes agent 2 over
    assert not group.is_current()
    clone = agents[0].clone(index=5)
    assert "_solo_group" not in clone.__dict__
    assert not any(a.data_ptr() == b.data_ptr() for a, b in zip(clone.actor.parameters(), agents[0].actor.parameters(),
                                                                strict=True))


def test_each_copy_runs_twin_critics_in_one_call_and_a_frozen_stack_passes_gradients_through() -> None:
    agents = box_agents(TD3)
    group = MemberGroup(agents)
    obs = torch.randn(len(agents), 5, BOX_OBS.shape[0])
    actions = torch.rand(len(agents), 5, BOX_ACT.shape[0], requires_grad=True)
    values = group.each_copy("critics", obs, actions)
    assert values.shape == (2, len(agents), 5, 1)
    for index, agent in enumerate(agents):
        for k, critic in enumerate((agent.critic_1, agent.critic_2)):
            assert torch.allclose(values[k, index], critic(obs[index], actions[index]), atol=1e-5)
    critic_params = list(group.nets["critics"].parameters())
    with group.frozen_stack("critics"):
        assert not any(param.requires_grad for param in critic_params)
        group.each_copy("critics", obs, actions).sum().backward()
    assert all(param.requires_grad for param in critic_params)
    assert actions.grad is not None and bool(actions.grad.abs().sum() > 0)
    assert all(param.grad is None or not bool(param.grad.any()) for param in critic_params)


def test_agents_that_do_not_stack_act_in_groups_of_their_own() -> None:
    def agents() -> list[DDPG]:
        fewer = TD3(BOX_OBS, BOX_ACT, net_config={**BOX_NET, "encoder_config": {"hidden_size": [32, 32]}}, seed=9,
                    vect_noise_dim=2)
        return [*box_agents(TD3)[:2], fewer, box_agents(TD3)[2]]

    batched, reference = agents(), agents()
    groups = make_groups(batched)
    assert [slots for slots, _ in groups] == [[0, 1, 3], [2]]
    obs = np.random.default_rng(2).uniform(-1, 1, (4 * 2, 3)).astype(np.float32)
    epsilons = [0.2, 0.0, 0.5, 0.0]
    expected = np.concatenate([agent.get_action(obs[2 * i: 2 * i + 2], epsilon=eps)
                               for i, (agent, eps) in enumerate(zip(reference, epsilons, strict=True))])
    np.testing.assert_allclose(_act(groups, obs, epsilons, 2, None, 4), expected, atol=1e-5)
    dict_agent = DDPG(spaces.Dict({"x": BOX_OBS}), BOX_ACT)  # multi-input networks take the same path
    assert can_batch([dict_agent], ReplayBuffer(10, BOX_OBS, BOX_ACT))


def test_single_agent_trains_the_same_batched_or_not() -> None:
    """One agent (the population env is the env itself): the batched phase takes the same actions,
    noise resets, samples and updates as the one-by-one loop, so the runs agree to float rounding."""
    runs = []
    for batched in (True, False):
        env = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync", max_episode_steps=50)
        agent = TD3(env.single_observation_space, env.single_action_space, net_config=BOX_NET, seed=0, batch_size=16,
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
    pop = [cls(env.single_observation_space, env.single_action_space, index=i, net_config=BOX_NET, seed=i,
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
