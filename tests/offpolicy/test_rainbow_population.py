"""Rainbow DQN written once, over a leading member axis: a single agent's ``learn`` (``P = 1``)
equals the per-agent oracle with and without PER and n-step returns; a group of ``P`` members
(noisy layers stacked, each member drawing its own noise) equals ``P`` single agents, priorities
written back included; the batched training phase runs with prioritized and n-step memories."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import agile_offpolicy.training as training_module
from agile_core.algorithms.group import MemberGroup
from agile_core.networks import NoisyLinear
from agile_core.networks.stacked_noisy import StackedNoisyLinear
from agile_core.training.population import act_groups as _act
from agile_offpolicy.buffers import MultiStepReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer
from agile_offpolicy.population import ReplayMemories, can_batch, make_groups
from agile_offpolicy.rainbow import RainbowDQN
from agile_offpolicy.training import train_off_policy
from tests.offpolicy.oracles import rainbow_act, rainbow_learn
from tests.offpolicy.test_population_groups import SCHEDULE, assert_same

OBS, ACT = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(3)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [32]}, "head_config": {"hidden_size": [16]}}
SETTINGS = [dict(lr=1e-3, batch_size=16, gamma=0.99, tau=1e-2, beta=0.4, prior_eps=1e-6),
            dict(lr=3e-3, batch_size=24, gamma=0.9, tau=5e-3, beta=0.6, prior_eps=1e-3),
            dict(lr=5e-4, batch_size=8, gamma=0.95, tau=1.0, beta=0.2, prior_eps=1e-5)]
KINDS = ["uniform", "per", "n_step", "per_n_step", "per_n_step_combined"]


def memories_for(kind: str, num_envs: int = 2, steps: int = 200) -> ReplayMemories:
    """`kind` memories filled with random vector steps (episodes end now and then)."""
    n_step = MultiStepReplayBuffer(1000, OBS, ACT, n_step=3, gamma=0.9, num_envs=num_envs)
    if kind == "uniform":
        memories = ReplayMemories(ReplayBuffer(1000, OBS, ACT))
    elif kind == "n_step":
        memories = ReplayMemories(n_step)
    elif kind == "per":
        memories = ReplayMemories(PrioritizedReplayBuffer(1000, OBS, ACT), max_steps=5000)
    else:
        memories = ReplayMemories(PrioritizedReplayBuffer(1000, OBS, ACT), n_step, max_steps=5000)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        ended = rng.random(num_envs) < 0.1
        memories.add(rng.uniform(-1, 1, (num_envs, 4)).astype(np.float32), rng.integers(0, 3, num_envs),
                     rng.normal(size=num_envs).astype(np.float32), rng.uniform(-1, 1, (num_envs, 4)).astype(np.float32),
                     ended & (rng.random(num_envs) < 0.5), ended, np.ones(num_envs, dtype=bool))
    return memories


def rainbows(widths: bool = False, **options: Any) -> list[RainbowDQN]:
    agents = [RainbowDQN(OBS, ACT, net_config=NET, seed=i, num_atoms=11, v_min=-5.0, v_max=5.0, **hp, **options)
              for i, hp in enumerate(SETTINGS)]
    for agent in agents:
        agent.steps = 1000 * agent.index  # different annealed betas
    if widths:  # padded hidden and latent widths (the noisy layers' inputs) in one group
        agents[0].apply_architecture_mutation("encoder.add_node", np.random.default_rng(4), hidden_layer=0,
                                              numb_new_nodes=16)
        agents[1].apply_architecture_mutation("advantage.remove_node", np.random.default_rng(5), hidden_layer=0,
                                              numb_nodes=8)
        agents[2].apply_architecture_mutation("add_latent_node", np.random.default_rng(6))
        agents[2].apply_architecture_mutation("value.add_node", np.random.default_rng(7), hidden_layer=0,
                                              numb_new_nodes=8)
    return agents


def noise(agent: RainbowDQN) -> list[torch.Tensor]:
    return [buffer.detach().clone() for network in (agent.actor, agent.actor_target) for module in network.modules()
            if isinstance(module, NoisyLinear) for buffer in (module.eps_in, module.eps_out)]


def assert_same_rainbow(mine: RainbowDQN, theirs: RainbowDQN) -> None:
    assert_same(mine, theirs)
    for a, b in zip(noise(mine), noise(theirs), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def assert_same_priorities(mine: ReplayMemories, theirs: ReplayMemories) -> None:
    if mine.prioritized:
        size = len(mine)
        np.testing.assert_allclose(mine.memory.tree.leaves(np.arange(size)), theirs.memory.tree.leaves(np.arange(size)),
                                   rtol=1e-4)


def learn_one(memories: ReplayMemories, agent: Any, step: Any) -> Any:
    """Sample `agent`'s batch (with its n-step view), run `step`, write back priorities."""
    batch, n_batch = memories.sample(agent)
    out = step(agent, batch) if n_batch is None else step(agent, batch, n_batch)
    memories.write_back([batch.indices], [out])
    return out


def same_out(out: Any, expected: Any) -> None:
    assert out[0] == pytest.approx(expected[0], rel=1e-4, abs=1e-6)
    np.testing.assert_allclose(out[1], expected[1], rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------- P = 1 vs the oracle
@pytest.mark.parametrize("kind", KINDS)
def test_single_agent_learning_equals_the_per_agent_oracle(kind: str) -> None:
    agent = rainbows(combined_reward=kind.endswith("combined"))[1]
    oracle = copy.deepcopy(agent)
    memories = memories_for(kind)
    oracle_memories = copy.deepcopy(memories)
    for _ in range(6):
        out = learn_one(memories, agent, lambda a, *batches: a.learn(*batches))
        assert isinstance(out[0], float) and out[1].dtype == np.float64 and out[1].shape == (agent.batch_size,)
        same_out(out, learn_one(oracle_memories, oracle, rainbow_learn))
    assert_same_rainbow(agent, oracle)
    assert_same_priorities(memories, oracle_memories)
    assert agent.solo_group().stacked  # noisy layers stack: a group of one runs the stacked code


# ---------------------------------------------------------------------------- P = 3 vs three P = 1
@pytest.mark.parametrize(("kind", "widths"), [("uniform", True), ("per", False), ("per_n_step", True),
                                              ("per_n_step_combined", False), ("n_step", False)])
def test_group_learning_equals_single_agents(kind: str, widths: bool) -> None:
    options = {"combined_reward": kind.endswith("combined")}
    batched, single = rainbows(widths, **options), rainbows(widths, **options)
    memories = memories_for(kind)
    single_memories = copy.deepcopy(memories)
    for agents, memory in ((batched, memories), (single, single_memories)):  # a first step alone (Adam state)
        for agent in agents:
            learn_one(memory, agent, lambda a, *batches: a.learn(*batches))
    group = MemberGroup(batched)
    assert group.stacked and len(group.select([False, True, True])) == 2
    assert any(isinstance(module, StackedNoisyLinear) for module in group.nets["actor"].modules())
    for active in SCHEDULE:  # partial rounds on the smallest member range, as the loop runs them
        view = group.select(active)
        part = list(active[view.offset:view.offset + len(view)])
        batch = memories.sample_population(view.members, part, "cpu")
        own = RainbowDQN.learn_population(view, batch, part)
        memories.write_back(batch.indices, own)
        outs = [None] * view.offset + own
        outs += [None] * (len(active) - len(outs))
        drawn = [single_memories.sample(agent) if on else None for agent, on in zip(single, active, strict=True)]
        for agent, out, sample in zip(single, outs, drawn, strict=True):  # every member drew before any learnt
            if sample is None:
                assert out is None
                continue
            expected = agent.learn(sample[0]) if sample[1] is None else agent.learn(*sample)
            same_out(out, expected)
            single_memories.write_back([sample[0].indices], [expected])  # one by one, in member order
    for mine, theirs in zip(batched, single, strict=True):
        assert_same_rainbow(mine, theirs)
    assert_same_priorities(memories, single_memories)
    for agents, memory in ((batched, memories), (single, single_memories)):  # and they go on alone
        for agent in agents:
            learn_one(memory, agent, lambda a, *batches: a.learn(*batches))
    for mine, theirs in zip(batched, single, strict=True):
        assert_same_rainbow(mine, theirs)


def test_group_acting_equals_each_member_alone() -> None:
    agents = rainbows(widths=True)
    reference = copy.deepcopy(agents)
    groups = make_groups(agents)
    assert [slots for slots, _ in groups] == [[0, 1, 2]]
    rng = np.random.default_rng(3)
    obs = rng.uniform(-1, 1, (3 * 4, 4)).astype(np.float32)
    masks = rng.random((3 * 4, 3)) < 0.6
    masks[np.arange(12), rng.integers(0, 3, 12)] = True
    for training in (True, False):
        for mask in (None, masks):
            expected = np.concatenate([
                rainbow_act(agent, obs[4 * i:4 * i + 4], None if mask is None else mask[4 * i:4 * i + 4], training)
                for i, agent in enumerate(reference)])
            np.testing.assert_array_equal(_act(groups, obs, [0.0] * 3, 4, mask, 3, training=training), expected)
            for i, agent in enumerate(agents):
                part = None if mask is None else mask[4 * i:4 * i + 4]
                np.testing.assert_array_equal(agent.get_action(obs[4 * i:4 * i + 4], action_mask=part,
                                                               training=training), expected[4 * i:4 * i + 4])
    assert all(agent.actor.training for agent in agents) and groups[0][1].nets["actor"].training


def test_group_members_draw_into_the_stacked_noise() -> None:
    agents = rainbows(widths=True)
    group = MemberGroup(agents)
    before = [module.eps_in.clone() for module in group.nets["actor"].modules() if isinstance(module, StackedNoisyLinear)]
    agents[1].reset_noise()
    after = [module.eps_in for module in group.nets["actor"].modules() if isinstance(module, StackedNoisyLinear)]
    for old, new in zip(before, after, strict=True):
        assert torch.equal(old[0], new[0]) and torch.equal(old[2], new[2]) and not torch.equal(old[1], new[1])
    layer = agents[1].actor.value.output_layer
    stacked = group.nets["actor"].value.output_layer
    assert torch.equal(stacked.eps_out[1, :layer.out_features], layer.eps_out)


# ---------------------------------------------------------------------------- the batched training phase
def test_extended_memories_batch() -> None:
    agents = rainbows()
    assert can_batch(agents, PrioritizedReplayBuffer(10, OBS, ACT))
    assert can_batch(agents, MultiStepReplayBuffer(10, OBS, ACT, n_step=3, gamma=0.9))

    class OwnSampling(PrioritizedReplayBuffer):
        pass

    assert not can_batch(agents, OwnSampling(10, OBS, ACT))


def cartpole(num_envs: int = 2) -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")


def per_n_step(env: gym.vector.VectorEnv) -> tuple[PrioritizedReplayBuffer, MultiStepReplayBuffer]:
    obs_space, act_space = env.single_observation_space, env.single_action_space
    return (PrioritizedReplayBuffer(2000, obs_space, act_space, seed=0),
            MultiStepReplayBuffer(2000, obs_space, act_space, n_step=3, gamma=0.99, num_envs=env.num_envs, seed=0))


def test_single_agent_trains_the_same_batched_or_not_with_per_and_n_step() -> None:
    """One agent: the batched phase samples, learns and writes priorities back as the one-by-one
    loop does, so the runs agree to float rounding."""
    runs = []
    for batched in (True, False):
        env = cartpole()
        agent = RainbowDQN(env.single_observation_space, env.single_action_space, net_config=NET, seed=0,
                           batch_size=16, learn_step=2, num_atoms=11, v_min=-5.0, v_max=5.0)
        memory, n_step_memory = per_n_step(env)
        (agent,), fitness = train_off_policy(env, "CartPole-v1", "RainbowDQN", [agent], memory,
                                             n_step_memory=n_step_memory, max_steps=240, evo_steps=120,
                                             learning_delay=32, verbose=False, seed=1, batch_population=batched)
        runs.append((agent, fitness, memory))
        env.close()
    (batched_agent, batched_fitness, batched_memory), (agent, fitness, memory) = runs
    assert batched_agent.learn_counter == agent.learn_counter > 40
    assert batched_fitness == pytest.approx(fitness, rel=1e-3)
    for p, q in zip(batched_agent.actor.parameters(), agent.actor.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=0)
    leaves = np.arange(len(memory))
    np.testing.assert_allclose(batched_memory.tree.leaves(leaves), memory.tree.leaves(leaves), rtol=1e-3)


def test_train_off_policy_batches_a_rainbow_population_with_per_and_n_step(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    phase = training_module.collect_and_learn_population

    def counting(agents, env, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((len(agents), env.num_envs))
        return phase(agents, env, *args, **kwargs)

    monkeypatch.setattr(training_module, "collect_and_learn_population", counting)
    env = cartpole()
    pop = [RainbowDQN(env.single_observation_space, env.single_action_space, index=i, net_config=NET, seed=i,
                      batch_size=batch_size, learn_step=2, num_atoms=11, v_min=-5.0, v_max=5.0)
           for i, batch_size in enumerate([32, 16, 64])]
    memory, n_step_memory = per_n_step(env)
    pop, fitnesses = train_off_policy(env, "CartPole-v1", "RainbowDQN", pop, memory, n_step_memory=n_step_memory,
                                      max_steps=300, evo_steps=150, learning_delay=64, verbose=False, seed=0)
    env.close()
    assert calls and all(call == (3, 6) for call in calls)
    assert len(fitnesses) == 3 and all(np.isfinite(fitnesses))
    assert all(agent.steps == 300 and agent.learn_counter > 50 for agent in pop)
    assert n_step_memory.num_envs == 2 and len(memory) == len(n_step_memory) > 0 and memory.ptr == n_step_memory.ptr
    leaves = memory.tree.leaves(np.arange(len(memory)))
    assert len(np.unique(leaves)) > 100  # priorities were written back
