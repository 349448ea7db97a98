"""Agents as safetensors bytes: exact round trips, in-place loads across architectures, and
damaged buffers refused."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from agile_core.checkpoint import CheckpointError
from agile_core.distributed.agent_bytes import agent_from_bytes, agent_to_bytes, load_agent_bytes
from agile_onpolicy.ppo import PPO

NET = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}}


def ppo(seed: int, **kwargs) -> PPO:
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="vector_entry_point")
    return PPO(env.single_observation_space, env.single_action_space, seed=seed, net_config=NET, learn_step=16,
               batch_size=16, **kwargs)


def assert_same(a: PPO, b: PPO) -> None:
    for name in a.network_names:
        left, right = getattr(a, name).state_dict(), getattr(b, name).state_dict()
        assert left.keys() == right.keys()
        for key in left:
            assert torch.equal(left[key], right[key]), (name, key)
    assert a.hyperparameters() == b.hyperparameters()
    assert (a.index, a.fitness, a.scores, a.steps, a.learn_counter) == (b.index, b.fitness, b.scores, b.steps,
                                                                      b.learn_counter)
    assert a.rng.integers(1 << 30) == b.rng.integers(1 << 30)


def configs(agent: PPO) -> dict:
    return {name: getattr(agent, name).config for name in agent.network_names}


def trained(seed: int) -> PPO:
    agent = ppo(seed, lr=3e-3)
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="vector_entry_point")
    from agile_onpolicy.training import OnPolicyPhase

    env.reset(seed=seed)
    OnPolicyPhase(env)(0, agent, 32, lambda: False)
    agent.fitness.append(12.5)
    agent.index = 3
    return agent


def test_a_trained_agent_survives_the_round_trip_exactly() -> None:
    agent = trained(0)
    data = agent_to_bytes(agent)
    assert isinstance(data, bytes) and b"agile_agent" in data[:4096]  # the JSON header, not a pickle
    assert b"\x80\x04\x95" not in data[:16]  # no pickle protocol opcode at the start
    copy = agent_from_bytes(data)
    assert_same(agent, copy)
    for slot in agent._optimizers:  # Adam moments travel too
        mine, theirs = getattr(agent, slot.attr).state_dict(), getattr(copy, slot.attr).state_dict()
        assert len(mine["state"]) == len(theirs["state"]) > 0
        for key, state in mine["state"].items():
            assert all(torch.equal(state[k], theirs["state"][key][k]) for k in state)


def test_loading_in_place_takes_the_architecture_and_state_of_the_bytes() -> None:
    source = trained(1)
    assert source.mutate_architecture(np.random.default_rng(0), new_layer_prob=1.0) is not None
    target = ppo(7)
    assert configs(target) != configs(source)
    load_agent_bytes(target, agent_to_bytes(source))
    assert_same(source, target)
    assert configs(target) == configs(source)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no_metadata"])
def test_damaged_buffers_are_refused(damage: str) -> None:
    import safetensors.torch

    data = agent_to_bytes(trained(2))
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!"
    else:
        data = safetensors.torch.save({"w": torch.zeros(2)})
    with pytest.raises(CheckpointError):
        agent_from_bytes(data)
