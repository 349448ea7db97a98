"""CQN: its conservative loss, the population-shaped step, and ``train_offline`` end to end."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from agile_core.algorithms.group import MemberGroup, PopulationBatch
from agile_core.buffers import ReplayBuffer
from agile_core.specs.manifest import TrainingManifest
from agile_core.trainer import LocalTrainer
from agile_offline import CQN, train_offline
from agile_offline.datasets import DatasetError, write_hdf5, write_minari
from agile_offpolicy import DQN
from tests.offline.cartpole_data import random_cartpole

NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


@pytest.fixture(scope="module")
def data():
    return random_cartpole(episodes=30, seed=0)


def _spaces():
    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space


def _batch(data, rows: int = 32, seed: int = 0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(len(data), size=rows)
    return (torch.as_tensor(data.observations[idx]), torch.as_tensor(data.actions[idx]),
            torch.as_tensor(data.rewards[idx]), torch.as_tensor(data.next_observations[idx]),
            torch.as_tensor(data.terminations[idx], dtype=torch.float32))


def test_loss_is_td_error_plus_the_conservative_penalty(data):
    agent = CQN(*_spaces(), net_config=NET, seed=1, cql_alpha=0.7, gamma=0.9)
    obs, action, reward, next_obs, done = _batch(data)
    with torch.no_grad():
        q = agent.actor(obs)
        target = reward + 0.9 * (1 - done) * agent.actor_target(next_obs).max(dim=1).values
        q_taken = q.gather(1, action.long().unsqueeze(1)).squeeze(1)
        expected = ((q_taken - target) ** 2).mean() + 0.7 * (torch.logsumexp(q, dim=1) - q_taken).mean()
    loss = agent.learn((obs, action, reward, next_obs, done))
    assert loss == pytest.approx(float(expected), rel=1e-5)


def test_without_penalty_cqn_learns_exactly_like_dqn(data):
    cqn = CQN(*_spaces(), net_config=NET, seed=3, cql_alpha=0.0, double=True)
    dqn = DQN(*_spaces(), net_config=NET, seed=3, double=True, lr=cqn.lr, tau=cqn.tau, batch_size=cqn.batch_size)
    for step in range(3):
        assert cqn.learn(_batch(data, seed=step)) == pytest.approx(dqn.learn(_batch(data, seed=step)), rel=1e-6)
    for a, b in zip(cqn.actor.parameters(), dqn.actor.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_population_step_equals_each_member_alone(data):
    alphas = (0.0, 0.5, 2.0)
    solo = [CQN(*_spaces(), net_config=NET, seed=7, cql_alpha=alpha, lr=1e-3) for alpha in alphas]
    grouped = [CQN(*_spaces(), net_config=NET, seed=7, cql_alpha=alpha, lr=1e-3) for alpha in alphas]
    batches = [_batch(data, seed=10 + i) for i in range(3)]
    expected = [agent.learn(batch) for agent, batch in zip(solo, batches, strict=True)]
    group = MemberGroup(grouped)
    parts = [PopulationBatch.of_one(batch, "cpu") for batch in batches]
    stacked = PopulationBatch(obs=torch.cat([p.obs for p in parts]), action=torch.cat([p.action for p in parts]),
                              reward=torch.cat([p.reward for p in parts]),
                              next_obs=torch.cat([p.next_obs for p in parts]),
                              done=torch.cat([p.done for p in parts]), weights=torch.cat([p.weights for p in parts]))
    losses = CQN.learn_population(group, stacked, [True] * 3)
    assert losses == pytest.approx(expected, rel=1e-5)
    for one, member in zip(solo, grouped, strict=True):
        for a, b in zip(one.actor.parameters(), member.actor.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _memory(data) -> ReplayBuffer:
    observation_space, action_space = _spaces()
    return ReplayBuffer(len(data), observation_space, action_space)


def test_train_offline_learns_from_a_mapping_and_resumes(data, tmp_path):
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    pop = [CQN(env.single_observation_space, env.single_action_space, index=i, net_config=NET, seed=i)
           for i in range(2)]
    mapping = {"observations": data.observations, "actions": data.actions, "rewards": data.rewards,
               "next_observations": data.next_observations, "terminals": data.terminations}
    pop, fitnesses = train_offline(env, "CartPole-v1", "CQN", pop, _memory(data), max_steps=60, evo_steps=30,
                                   eval_steps=50, dataset=mapping, verbose=False, checkpoint=30,
                                   checkpoint_path=str(tmp_path / "ckpt"), seed=0)
    assert len(fitnesses) == 2 and all(agent.steps == 60 for agent in pop)
    assert all(len(agent.fitness) == 2 for agent in pop)
    fresh = [CQN(env.single_observation_space, env.single_action_space, index=i, net_config=NET) for i in range(2)]
    resumed, _ = train_offline(env, "CartPole-v1", "CQN", fresh, _memory(data), max_steps=90, evo_steps=30,
                               eval_steps=50, dataset=mapping, verbose=False,
                               resume_from_checkpoint=str(tmp_path / "ckpt"))
    assert all(agent.steps == 90 for agent in resumed)


def test_batched_and_one_by_one_training_agree(data):
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    results = []
    for batched in (True, False):
        pop = [CQN(env.single_observation_space, env.single_action_space, index=i, net_config=NET, seed=i,
                   cql_alpha=0.5 * i) for i in range(2)]
        pop, _ = train_offline(env, "CartPole-v1", "CQN", pop, _memory(data), max_steps=20, evo_steps=20,
                               eval_steps=20, dataset=data, verbose=False, batch_population=batched, seed=1)
        results.append([torch.cat([p.detach().reshape(-1) for p in agent.actor.parameters()]) for agent in pop])
    for batched, alone in zip(*results, strict=True):
        torch.testing.assert_close(batched, alone, rtol=1e-4, atol=1e-5)


def test_train_offline_refuses_bad_arguments(data):
    env = gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync")
    agent = CQN(env.single_observation_space, env.single_action_space, net_config=NET)
    with pytest.raises(ValueError, match="not both"):
        train_offline(env, "c", "CQN", [agent], _memory(data), dataset=data, minari_dataset_id="a/b-v0")
    with pytest.raises(ValueError, match="never downloads"):
        train_offline(env, "c", "CQN", [agent], _memory(data), minari_dataset_id="a/b-v0", remote=True)
    with pytest.raises(ValueError, match="fewer than a batch"):
        train_offline(env, "c", "CQN", [agent], _memory(data), verbose=False)
    pendulum = gym.make_vec("Pendulum-v1", num_envs=1, vectorization_mode="sync")
    with pytest.raises(DatasetError):
        train_offline(pendulum, "p", "CQN", [agent], _memory(data), dataset=data, verbose=False)


def _manifest(**environment) -> TrainingManifest:
    return TrainingManifest.get_validated({
        "algorithm": {"name": "CQN", "batch_size": 32},
        "environment": {"name": "CartPole-v1", "num_envs": 2, **environment},
        "training": {"max_steps": 40, "evo_steps": 20, "pop_size": 2, "eval_steps": 30, "seed": 0},
        "network": NET, "mutation": {"rand_seed": 0},
    })


def test_manifest_trains_from_an_hdf5_file(data, tmp_path):
    path = write_hdf5(data, tmp_path / "data.h5")
    population, fitnesses = LocalTrainer.from_manifest(_manifest(dataset_path=str(path))).train(verbose=False)
    assert len(population) == 2 and len(fitnesses) == 2


def test_manifest_trains_from_a_local_minari_dataset(data, tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    observation_space, action_space = _spaces()
    write_minari(data, "cartpole/random-v0", "CartPole-v1", observation_space=observation_space,
                 action_space=action_space)
    population, _ = LocalTrainer.from_manifest(_manifest(minari_dataset_id="cartpole/random-v0")).train(verbose=False)
    assert all(agent.steps == 40 for agent in population)


def test_manifest_needs_exactly_one_dataset_source():
    from agile_core.errors import ManifestError

    with pytest.raises(ManifestError, match="exactly one dataset source"):
        _manifest()
    with pytest.raises(ManifestError, match="both are set"):
        _manifest(dataset_path="a.h5", minari_dataset_id="a/b-v0")


def test_missing_dataset_file_names_the_field(tmp_path):
    from agile_core.errors import ManifestError

    with pytest.raises(ManifestError, match=r"environment\.dataset_path"):
        LocalTrainer.from_manifest(_manifest(dataset_path=str(tmp_path / "none.h5"))).train(verbose=False)


@pytest.mark.parametrize("loop", ["train_offline", "train_bandits"])
def test_loop_docstring_documents_every_parameter_once(loop):
    import inspect
    import re

    from agile_offline.bandits.training import train_bandits

    function = {"train_offline": train_offline, "train_bandits": train_bandits}[loop]
    documented = re.findall(r"^    (\w+): ", inspect.getdoc(function) or "", flags=re.MULTILINE)
    assert sorted(documented) == sorted(inspect.signature(function).parameters)
    assert "Run options" in (function.__doc__ or "")
