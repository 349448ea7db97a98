"""Population-batched DQN equals the per-agent computation (weights, targets, Adam state, RNG)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.networks.stacked import NotStackableError, stack_modules
from agile_offpolicy.buffers import ReplayBuffer
from agile_offpolicy.dqn import DQN
from agile_offpolicy.dqn_population import DQNGroup

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = spaces.Discrete(3)
NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [32, 32]}, "head_config": {"hidden_size": [16]}}


def filled_memory(rows: int = 500) -> ReplayBuffer:
    memory = ReplayBuffer(1000, OBS, ACT)
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (rows, 4)).astype(np.float32)
    memory.add(obs, rng.integers(0, 3, rows), rng.normal(size=rows).astype(np.float32),
               rng.uniform(-1, 1, (rows, 4)).astype(np.float32), (rng.random(rows) < 0.2))
    return memory


def population(double: bool = True, widths: bool = False) -> list[DQN]:
    """Same architecture (one has an inserted residual layer, replayed on all), different
    hyperparameters; with `widths`, members then differ in layer and latent widths (padded) and
    in inserted residual layers (phantoms)."""
    settings = [dict(lr=1e-3, batch_size=16, gamma=0.99, tau=1e-2),
                dict(lr=3e-3, batch_size=24, gamma=0.9, tau=5e-3),
                dict(lr=5e-4, batch_size=8, gamma=0.95, tau=1.0)]
    agents = [DQN(OBS, ACT, net_config=NET, seed=index, double=double, **hp) for index, hp in enumerate(settings)]
    for agent in agents:
        agent.actor.mutate("encoder.add_layer", np.random.default_rng(3), hidden_layer=0)
        agent.actor_target.mutate("encoder.add_layer", np.random.default_rng(3), hidden_layer=0)
        agent.rebuild_optimizers(keep_state=False)
    if widths:
        agents[0].apply_architecture_mutation("encoder.add_node", np.random.default_rng(4), hidden_layer=1,
                                              numb_new_nodes=16)
        agents[1].apply_architecture_mutation("head.remove_node", np.random.default_rng(5), hidden_layer=0,
                                              numb_nodes=8)
        agents[2].apply_architecture_mutation("add_latent_node", np.random.default_rng(6))
        agents[1].apply_architecture_mutation("encoder.add_layer", np.random.default_rng(7), hidden_layer=2)
        agents[2].apply_architecture_mutation("head.add_layer", np.random.default_rng(8), hidden_layer=0)
        for agent in agents:  # open the new gates, so the inserted layers do something
            for network in (agent.actor, agent.actor_target):
                for block in [*network.encoder.layers, *network.head.layers]:
                    if block.residual:
                        with torch.no_grad():
                            block.gate.fill_(0.5)
    return agents


def test_stacked_forward_equals_each_member() -> None:
    agents = population()
    stacked = stack_modules([agent.actor for agent in agents])
    x = torch.randn(len(agents), 10, 4)
    expected = torch.stack([agent.actor(x[i]) for i, agent in enumerate(agents)])
    assert torch.allclose(stacked(x), expected, atol=1e-6)


@pytest.mark.parametrize(("fused", "double", "widths", "loss"),
                         [(True, True, False, "huber"), (True, False, False, "huber"), (False, True, False, "huber"),
                          (True, True, True, "huber"), (False, True, True, "huber"), (True, True, False, "mse"),
                          (False, True, False, "mse")])
def test_batched_learning_equals_one_by_one_learning(fused: bool, double: bool, widths: bool, loss: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DQN, "loss", loss)
    memory = filled_memory()
    batched, reference = population(double, widths), population(double, widths)
    if widths:
        assert len({str(agent.actor.config) for agent in batched}) == 3
    for agent in reference:  # a first step outside the group, so Adam starts from saved state
        agent.learn(memory.sample(agent.batch_size, agent.rng))
    for agent in batched:
        agent.learn(memory.sample(agent.batch_size, agent.rng))
    group = DQNGroup(batched, fused=fused)
    assert (group.chain is not None) == fused
    # idle members inside, at the end of and before the active range (the last two run on a sub-range)
    schedule = [(True, True, True), (True, False, True), (False, True, True), (True, True, True),
                (True, False, False), (False, False, True)] * 2
    for active in schedule:
        losses = group.learn(group.sample(memory, active), active)
        for agent, on, loss in zip(reference, active, losses, strict=True):
            if on:
                assert loss == pytest.approx(agent.learn(memory.sample(agent.batch_size, agent.rng)), rel=1e-4, abs=1e-6)
            else:
                assert loss is None
    group.copy_to_members()
    for mine, theirs in zip(batched, reference, strict=True):
        assert mine.learn_counter == theirs.learn_counter
        for name in ("actor", "actor_target"):
            for (key, a), b in zip(getattr(mine, name).named_parameters(), getattr(theirs, name).parameters(),
                                   strict=True):
                assert torch.allclose(a, b, atol=1e-5), f"{name}.{key}"
        state_a, state_b = mine.optimizer.state_dict()["state"], theirs.optimizer.state_dict()["state"]
        for key in state_b:
            assert float(state_a[key]["step"]) == float(state_b[key]["step"])
            assert torch.allclose(state_a[key]["exp_avg"], state_b[key]["exp_avg"], atol=1e-6)
        # the sampling RNG advanced identically
        assert mine.rng.integers(1 << 30) == theirs.rng.integers(1 << 30)


def test_batched_acting_matches_get_action() -> None:
    batched, reference = population(), population()
    group = DQNGroup(batched)
    obs = np.random.default_rng(1).uniform(-1, 1, (3 * 5, 4)).astype(np.float32)
    actions = group.act(obs, [0.0, 0.5, 1.0])
    expected = np.concatenate([agent.get_action(obs[5 * i: 5 * i + 5], epsilon=eps)
                               for i, (agent, eps) in enumerate(zip(reference, [0.0, 0.5, 1.0], strict=True))])
    np.testing.assert_array_equal(actions, expected)


def test_widths_and_inserted_layers_stack_but_plain_layer_counts_do_not() -> None:
    agents = population(widths=True)
    stacked = stack_modules([agent.actor for agent in agents])
    x = torch.randn(len(agents), 10, 4)
    expected = torch.stack([agent.actor(x[i]) for i, agent in enumerate(agents)])
    assert torch.allclose(stacked(x), expected, atol=1e-6)
    fewer = DQN(OBS, ACT, net_config={**NET, "encoder_config": {"hidden_size": [32]}})
    with pytest.raises(NotStackableError):
        DQNGroup([*agents, fewer])


def test_groups_order_agents_by_learn_step_and_act_for_the_right_slots() -> None:
    from agile_offpolicy.population import _act, make_groups

    batched, reference = population(), population()
    for agents in (batched, reference):
        for agent, learn_step in zip(agents, (8, 2, 4), strict=True):
            agent.learn_step = learn_step
    groups = make_groups(batched)
    assert [slots for slots, _ in groups] == [[1, 2, 0]]  # the busiest learners first
    obs = np.random.default_rng(2).uniform(-1, 1, (3 * 5, 4)).astype(np.float32)
    epsilons = [0.0, 0.5, 1.0]
    actions = _act(groups, obs, epsilons, 5, None, 3)
    expected = np.concatenate([agent.get_action(obs[5 * i: 5 * i + 5], epsilon=eps)
                               for i, (agent, eps) in enumerate(zip(reference, epsilons, strict=True))])
    np.testing.assert_array_equal(actions, expected)
