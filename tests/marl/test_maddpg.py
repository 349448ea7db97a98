"""MADDPG: spec defaults, the learning step against a per-agent oracle, groups of members against
single agents, acting, evolution and checkpoints."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_core.algorithms.group import MemberGroup
from agile_core.algorithms.spaces import UnsupportedSpaceError
from agile_core.hpo.hyperparameters import HyperparameterConfig, RLParameter
from agile_marl.maddpg import MADDPG, joint_observation_space
from agile_marl.matd3 import MATD3
from agile_marl.specs.maddpg import MADDPGSpec, MATD3Spec
from tests.marl.oracles_maddpg import (
    ACTIONS,
    DICT_OBS,
    NET,
    OBS,
    assert_same,
    build,
    filled_memory,
    maddpg_learn,
    random_obs,
)

# idle members inside, at the start and at the end of the population
SCHEDULE = [(True, True, True), (True, False, True), (False, True, True), (True, True, False), (True, True, True),
            (False, False, True), (True, True, True)]


def same_losses(loss: dict[str, float], expected: dict[str, float]) -> None:
    assert loss.keys() == expected.keys()
    for name, value in expected.items():
        assert loss[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name


# ---------------------------------------------------------------------------- specs
@pytest.mark.parametrize(("spec", "cls"), [(MADDPGSpec, MADDPG), (MATD3Spec, MATD3)])
def test_constructor_defaults_are_the_spec_defaults(spec: Any, cls: type) -> None:
    parameters: dict[str, inspect.Parameter] = {}
    for klass in reversed(cls.__mro__):
        init = vars(klass).get("__init__")
        if init is not None:
            parameters.update(inspect.signature(init).parameters)
    for field, default in spec.defaults().items():
        assert parameters[field].default == default, field
    agent = cls(OBS, ACTIONS["continuous"])
    assert {name: getattr(agent, name) for name in spec.defaults()} == spec.defaults()
    assert set(spec.defaults()) <= set(cls.hyperparameter_names)
    assert spec.registered_name() == cls.__name__ and spec.algorithm_class.endswith(f":{cls.__name__}")
    assert MADDPGSpec.defaults()["lr_critic"] == 1e-2 and MATD3Spec.defaults()["policy_freq"] == 2


def test_invalid_settings_and_spaces_are_rejected() -> None:
    with pytest.raises(ValueError):
        MADDPG(OBS, ACTIONS["continuous"], gamma=0.0)
    with pytest.raises(ValueError):
        MATD3(OBS, ACTIONS["continuous"], policy_freq=0)
    with pytest.raises(UnsupportedSpaceError):
        MADDPG(OBS, {**ACTIONS["continuous"], "listener_0": spaces.Box(-np.inf, np.inf, (2,))})
    with pytest.raises(UnsupportedSpaceError):
        MADDPG(OBS, {**ACTIONS["continuous"], "listener_0": spaces.MultiBinary(2)})


def test_critics_read_every_agent() -> None:
    assert joint_observation_space(OBS).shape == (8,)
    assert isinstance(joint_observation_space(DICT_OBS), spaces.Dict)
    agent = MADDPG(OBS, ACTIONS["mixed"], net_config=NET)
    assert agent.critic_speaker_0.action_dim == agent.critic_listener_0.action_dim == 3 + 2
    assert agent.network_names[:2] == ["actor_speaker_0", "actor_target_speaker_0"]
    assert agent.policy_name == "actor_speaker_0"


# ---------------------------------------------------------------------------- P = 1 vs the oracle
@pytest.mark.parametrize("case", ["continuous", "discrete", "matd3", "dict_obs"])
def test_single_agent_learning_equals_the_per_agent_oracle(case: str) -> None:
    obs_spaces = DICT_OBS if case == "dict_obs" else OBS
    agent = build("matd3" if case in ("matd3", "dict_obs") else case,
                  obs_spaces=obs_spaces)[2]
    memory = filled_memory(obs_spaces, agent.action_spaces)
    oracle = copy.deepcopy(agent)
    for _ in range(6):
        loss = agent.learn(memory.sample(agent.batch_size, agent.rng))
        same_losses(loss, maddpg_learn(oracle, memory.sample(oracle.batch_size, oracle.rng)))
    assert_same(agent, oracle)


# ---------------------------------------------------------------------------- P = 3 vs three P = 1
@pytest.mark.parametrize(("case", "widths"), [("continuous", False), ("discrete", True)])
def test_group_learning_equals_single_agents(case: str, widths: bool) -> None:
    check_group_learning(case, widths)


def check_group_learning(case: str, widths: bool) -> None:
    """A group over a schedule with idle members equals the members learning alone."""
    batched, single = build(case, widths), build(case, widths)
    memory = filled_memory(OBS, batched[0].action_spaces)
    for agents in (batched, single):  # a first step alone, so the group starts from saved Adam state
        for agent in agents:
            agent.learn(memory.sample(agent.batch_size, agent.rng))
    group = MemberGroup(batched)
    assert group.stacked
    for active in SCHEDULE:  # partial rounds on the smallest member range, as the loop runs them
        view = group.select(active)
        part = list(active[view.offset:view.offset + len(view)])
        losses = [None] * view.offset + type(batched[0]).learn_population(
            view, memory.sample_population(view.members, part), part)
        losses += [None] * (len(active) - len(losses))
        for agent, on, loss in zip(single, active, losses, strict=True):
            if on:
                same_losses(loss, agent.learn(memory.sample(agent.batch_size, agent.rng)))  # type: ignore[arg-type]
            else:
                assert loss is None
    for mine, theirs in zip(batched, single, strict=True):
        assert_same(mine, theirs)
    for agents in (batched, single):  # and they go on alone from where the group left them
        for agent in agents:
            agent.learn(memory.sample(agent.batch_size, agent.rng))
    for mine, theirs in zip(batched, single, strict=True):
        assert_same(mine, theirs)


# ---------------------------------------------------------------------------- acting
@pytest.mark.parametrize("case", ["continuous", "discrete", "matd3"])
def test_group_acting_equals_single_agents(case: str) -> None:
    batched, single = build(case), build(case)
    rng = np.random.default_rng(1)
    rows = 2
    obs = {a: random_obs(s, 3 * rows, rng).reshape(3, rows, *s.shape) for a, s in OBS.items()}
    masks = None
    if case == "discrete":
        masks = {"speaker_0": rng.random((3, rows, 3)) < 0.6, "listener_0": np.ones((3, rows, 4), bool)}
        masks["speaker_0"][..., 0] = True
    group = MemberGroup(batched)
    for training in (True, False, True):
        result = type(batched[0]).act_population(group, batched[0].population_inputs(obs), training=training,
                                                 action_masks=masks)
        for p, agent in enumerate(single):
            infos = None if masks is None else {"action_mask": {a: m[p] for a, m in masks.items()}}
            expected = agent.get_action({a: o[p] for a, o in obs.items()}, training=training, infos=infos)
            for agent_id, action in expected.items():
                assert result.actions[agent_id].shape == (3, *action.shape)
                assert result.actions[agent_id].dtype == action.dtype
                np.testing.assert_allclose(result.actions[agent_id][p], action, rtol=1e-5, atol=1e-6)
                space = agent.action_spaces[agent_id]
                assert all(space.contains(row) for row in action)
                if masks is not None:
                    index = np.asarray(action) - int(getattr(space, "start", 0))
                    assert masks[agent_id][p][np.arange(rows), index].all()
    for mine, theirs in zip(batched, single, strict=True):
        assert mine.rng.bit_generator.state == theirs.rng.bit_generator.state


def test_noise_streams_follow_the_rows_and_reset_per_sub_env() -> None:
    agent = MADDPG(OBS, ACTIONS["continuous"], net_config=NET, seed=0, vect_noise_dim=1, expl_noise=0.5)
    obs = {a: np.zeros((4, *s.shape), np.float32) for a, s in OBS.items()}
    for _ in range(3):
        agent.get_action(obs)
    noise = agent.exploration["listener_0"]
    assert noise.num_envs == 4 and noise.shape == (4, 2)
    before = noise.state.copy()
    agent.reset_action_noise(np.array([True, False, False, True]))
    np.testing.assert_array_equal(noise.state[[0, 3]], 0.0)
    np.testing.assert_array_equal(noise.state[[1, 2]], before[[1, 2]])
    agent.set_hyperparameter("O_U_noise", False)
    assert type(agent.exploration["listener_0"]).__name__ == "GaussianNoise"
    greedy = agent.get_action(obs, training=False)
    np.testing.assert_array_equal(greedy["listener_0"], agent.get_action(obs, training=False)["listener_0"])


def test_a_dead_agent_weighs_nothing() -> None:
    """With every row of an agent masked, its critic and actor get no gradient (no Adam step moves them)."""
    agent = MADDPG(OBS, ACTIONS["continuous"], net_config=NET, seed=0, batch_size=8)
    memory = filled_memory(OBS, agent.action_spaces)
    batch = memory.sample(8, agent.rng)
    batch.mask["speaker_0"] = torch.zeros_like(batch.mask["speaker_0"])
    before = {name: [p.detach().clone() for p in getattr(agent, name).parameters()]
              for name in ("critic_speaker_0", "actor_speaker_0", "critic_listener_0")}
    loss = agent.learn(batch)
    assert np.isfinite(loss["critic"])
    for name in ("critic_speaker_0", "actor_speaker_0"):
        assert all(torch.equal(a, b) for a, b in zip(getattr(agent, name).parameters(), before[name], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(agent.critic_listener_0.parameters(), before["critic_listener_0"],
                                                     strict=True))


# ---------------------------------------------------------------------------- evolution and checkpoints
@pytest.mark.parametrize("cls", [MADDPG, MATD3])
def test_mutation_clone_and_checkpoint_round_trip(cls: type[MADDPG], tmp_path: Path) -> None:
    config = HyperparameterConfig(lr_actor=RLParameter("lr_actor", 1e-4, 1e-2),
                                  batch_size=RLParameter("batch_size", 4, 64, int))
    agent = cls(OBS, ACTIONS["mixed"], net_config=NET, seed=0, batch_size=8, hp_config=config)
    memory = filled_memory(OBS, agent.action_spaces)
    rng = np.random.default_rng(0)
    agent.learn(memory.sample(8, agent.rng))
    for _ in range(3):
        applied = agent.mutate_architecture(rng, new_layer_prob=0.5)
        assert applied is not None and any(name.startswith("critic") for name in applied["networks"])
        assert agent.actor_speaker_0.config == agent.actor_target_speaker_0.config
    for online, target in agent.target_pairs():  # targets restart from their online networks
        assert all(torch.equal(a, b) for a, b in zip(online.parameters(), target.parameters(), strict=True))
    before = [p.detach().clone() for name in ("actor_speaker_0", "actor_listener_0")
              for p in getattr(agent, name).parameters()]
    assert agent.mutate_parameters(rng, 0.1)["weights_changed"] > 0  # type: ignore[index]
    after = [p for name in ("actor_speaker_0", "actor_listener_0") for p in getattr(agent, name).parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    change = agent.mutate_hyperparameter(rng)
    assert change is not None and getattr(agent, change["hyperparameter"]) == change["new"]
    agent.get_action({a: np.zeros((2, *s.shape), np.float32) for a, s in OBS.items()})
    agent.learn(memory.sample(agent.batch_size, agent.rng))

    twin = agent.clone(index=3)
    assert twin.index == 3 and twin.exploration["listener_0"].rng is twin.rng
    assert twin.rng.bit_generator.state != agent.rng.bit_generator.state
    assert not any(a.data_ptr() == b.data_ptr() for a, b in zip(twin.actor_listener_0.parameters(),
                                                                agent.actor_listener_0.parameters(), strict=True))

    agent.save_checkpoint(tmp_path / "agent")
    loaded = cls.load(tmp_path / "agent")
    assert isinstance(loaded, cls)
    assert loaded.hyperparameters() == agent.hyperparameters()
    assert_same(loaded, agent)
    assert loaded.exploration["listener_0"].rng is loaded.rng
    for mine in (agent, loaded):  # both go on identically
        mine.learn(memory.sample(mine.batch_size, mine.rng))
        mine.get_action({a: np.ones((2, *s.shape), np.float32) for a, s in OBS.items()})
    assert_same(loaded, agent)


def test_agents_take_their_own_network_sections() -> None:
    net = {**NET, "listener": {"latent_dim": 8, "encoder_config": {"hidden_size": [12]}}}
    agent = MADDPG(OBS, ACTIONS["discrete"], net_config=net)
    assert agent.actor_speaker_0.config["latent_dim"] == 16 and agent.actor_listener_0.config["latent_dim"] == 8
    assert agent.critic_listener_0.config["latent_dim"] == 8
    memory = filled_memory(OBS, agent.action_spaces)
    assert np.isfinite(agent.learn(memory.sample(8, agent.rng))["critic"])
    rng = np.random.default_rng(0)
    for _ in range(8):  # each agent's mutation is resolved within its own section's bounds
        agent.mutate_architecture(rng, new_layer_prob=0.3)
    assert np.isfinite(agent.learn(memory.sample(8, agent.rng))["critic"])
