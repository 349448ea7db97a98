"""NeuralUCB and NeuralTS: spec defaults, one agent = the P = 1 case of the group step, the
covariance through checkpoints, cloning and architecture mutations."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

from agile_core.algorithms.base import EvolvableAlgorithm
from agile_core.algorithms.group import MemberGroup
from agile_offline.bandits import BanditEnv, NeuralTS, NeuralUCB
from agile_offline.bandits.base import BanditBatch, NeuralBandit
from agile_offline.specs.bandits import NeuralTSSpec, NeuralUCBSpec

NET = {"latent_dim": 8, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}
ALGORITHMS = [NeuralUCB, NeuralTS]


def _env() -> BanditEnv:
    rng = np.random.default_rng(0)
    return BanditEnv(rng.normal(size=(30, 3)), [i % 3 for i in range(30)], seed=0)


def _agent(cls: type[NeuralBandit], seed: int, env: BanditEnv | None = None, **kwargs: object) -> NeuralBandit:
    env = env or _env()
    return cls(env.single_observation_space, env.single_action_space, index=seed, net_config=NET, seed=seed,
               **kwargs)


def _params(agent: NeuralBandit) -> list[torch.Tensor]:
    return [p.detach().clone() for p in agent.net.parameters()]


@pytest.mark.parametrize(("cls", "spec"), [(NeuralUCB, NeuralUCBSpec), (NeuralTS, NeuralTSSpec)])
def test_keyword_defaults_come_from_the_spec(cls: type[NeuralBandit], spec: type) -> None:
    parameters = inspect.signature(cls).parameters
    for name, value in spec.defaults().items():
        assert parameters[name].default == value, name
    agent = _agent(cls, 0)
    assert agent.hyperparameters() == {**spec.defaults()}


@pytest.mark.parametrize("cls", ALGORITHMS)
def test_one_agent_is_the_p1_case_of_the_group(cls: type[NeuralBandit]) -> None:
    env = _env()
    solo = [_agent(cls, seed, env, lr=[1e-3, 5e-3][seed], reg=[0.0, 0.1][seed]) for seed in (0, 1)]
    grouped = [agent.clone() for agent in solo]
    contexts = [env.contexts(row) for row in range(4)]
    # acting: same arms and the same covariance updates, alone or stacked
    solo_arms = [[agent.get_action(c) for c in contexts] for agent in solo]
    group = MemberGroup(grouped)
    group_arms = [cls.act_population(group, torch.as_tensor(np.stack([c, c])), True) for c in contexts]
    assert [list(a) for a in zip(*group_arms, strict=True)] == solo_arms
    for a, b in zip(solo, grouped, strict=True):
        for name in a.covariance:
            torch.testing.assert_close(a.covariance[name], b.covariance[name])
        assert any((z != a.lamb).any() for z in a.covariance.values())
    # learning: two steps of each member's own batch
    rng = np.random.default_rng(1)
    batches = [(rng.normal(size=(8, 9)).astype(np.float32), rng.random(8).astype(np.float32)) for _ in solo]
    for _ in range(2):
        solo_losses = [agent.learn(*batch) for agent, batch in zip(solo, batches, strict=True)]
        stacked = BanditBatch(torch.as_tensor(np.stack([b[0] for b in batches])),
                              torch.as_tensor(np.stack([b[1] for b in batches])), torch.full((2, 8), 1 / 8))
        group_losses = cls.learn_population(group, stacked, [True, True])
        np.testing.assert_allclose(group_losses, solo_losses, rtol=1e-5)
    for a, b in zip(solo, grouped, strict=True):
        for p, q in zip(_params(a), _params(b), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    # an idle member does not move
    before = _params(grouped[1])
    cls.learn_population(group, stacked, [True, False])
    for p, q in zip(before, _params(grouped[1]), strict=True):
        torch.testing.assert_close(p, q)


def test_greedy_action_is_argmax_of_the_prediction() -> None:
    env = _env()
    agent = _agent(NeuralUCB, 0, env)
    contexts = env.contexts(0)
    z = {k: v.clone() for k, v in agent.covariance.items()}
    assert agent.get_action(contexts, training=False) == int(np.argmax(agent.predict(contexts)))
    assert all(torch.equal(z[k], agent.covariance[k]) for k in z)  # greedy acting leaves Z alone
    with pytest.raises(ValueError, match=r"contexts must be \[3, 9\]"):
        agent.get_action(contexts[:2])


@pytest.mark.parametrize("cls", ALGORITHMS)
def test_checkpoint_round_trip_keeps_covariance(cls: type[NeuralBandit], tmp_path: Path) -> None:
    env = _env()
    agent = _agent(cls, 0, env)
    for row in range(5):
        agent.get_action(env.contexts(row))
    agent.learn(np.ones((4, 9), np.float32), np.ones(4, np.float32))
    agent.cumulative_regret = 7.0
    path = agent.save_checkpoint(tmp_path / "agent")
    loaded = EvolvableAlgorithm.load(path)
    assert isinstance(loaded, cls)
    for name in agent.covariance:
        torch.testing.assert_close(loaded.covariance[name], agent.covariance[name])
        torch.testing.assert_close(loaded.theta0[name], agent.theta0[name])
    assert loaded.cumulative_regret == 7.0
    contexts = env.contexts(6)
    assert loaded.get_action(contexts) == agent.get_action(contexts)  # same Z, weights and rng


def test_clone_owns_its_covariance() -> None:
    env = _env()
    agent = _agent(NeuralUCB, 0, env)
    agent.get_action(env.contexts(0))  # Z now lives in the agent's group of one
    twin = agent.clone(index=5)
    for name in agent.covariance:
        torch.testing.assert_close(twin.covariance[name], agent.covariance[name])
    before = {k: v.clone() for k, v in twin.covariance.items()}
    agent.get_action(env.contexts(1))
    assert all(torch.equal(before[k], twin.covariance[k]) for k in before)
    twin.get_action(env.contexts(1))  # the clone acts with its own group


def test_architecture_mutation_keeps_old_entries_and_starts_new_ones_at_lamb() -> None:
    env = _env()
    agent = _agent(NeuralUCB, 0, env, lamb=2.0)
    agent.get_action(env.contexts(0))
    before = {name: z.clone() for name, z in agent.covariance.items()}
    agent.apply_architecture_mutation("encoder.add_node", np.random.default_rng(0))
    shapes = {name: p.shape for name, p in agent.net.named_parameters()}
    assert {name: z.shape for name, z in agent.covariance.items()} == shapes
    assert {name: t.shape for name, t in agent.theta0.items()} == shapes
    grown = [name for name in shapes if shapes[name] != before[name].shape]
    assert grown
    for name, z in agent.covariance.items():
        old = before[name]
        corner = tuple(slice(0, n) for n in old.shape)
        if name in grown:
            torch.testing.assert_close(z[corner], old)
            fresh = torch.ones_like(z, dtype=torch.bool)
            fresh[corner] = False
            assert (z[fresh] == 2.0).all()
        else:
            torch.testing.assert_close(z, old)
    assert agent.get_action(env.contexts(1)) in range(3)
    agent.learn(np.ones((4, 9), np.float32), np.zeros(4, np.float32))


def test_members_of_different_widths_share_a_group() -> None:
    env = _env()
    narrow, wide = _agent(NeuralUCB, 0, env), _agent(NeuralUCB, 1, env)
    wide.apply_architecture_mutation("encoder.add_node", np.random.default_rng(1))
    solo = [narrow.clone(), wide.clone()]
    group = MemberGroup([narrow, wide])
    contexts = env.contexts(0)
    arms = NeuralUCB.act_population(group, torch.as_tensor(np.stack([contexts, contexts])), True)
    assert list(arms) == [agent.get_action(contexts) for agent in solo]
    for a, b in zip(solo, (narrow, wide), strict=True):
        for name in a.covariance:
            torch.testing.assert_close(a.covariance[name], b.covariance[name])
