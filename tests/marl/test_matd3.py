"""MATD3: twin critics in one stack, smoothing and delayed updates, as a group and alone."""

from __future__ import annotations

import numpy as np
import pytest

from agile_core.algorithms.group import MemberGroup
from agile_marl.matd3 import MATD3
from tests.marl.oracles_maddpg import ACTIONS, DICT_OBS, NET, OBS, build, filled_memory
from tests.marl.test_maddpg import check_group_learning


@pytest.mark.parametrize("widths", [False, True])
def test_group_learning_equals_single_agents(widths: bool) -> None:
    check_group_learning("matd3", widths)


def test_twin_critics_share_one_stack_that_is_not_cut() -> None:
    agents = build("matd3")
    stacks = agents[0].population_stacks()
    assert stacks["critics_listener_0"] == ("critic_1_listener_0", "critic_2_listener_0")
    group = MemberGroup(agents)
    assert group.select([False, True, True]) is group


def test_delayed_actor_updates_follow_each_members_policy_freq() -> None:
    agent = MATD3(OBS, ACTIONS["mixed"], net_config=NET, seed=0, batch_size=8, policy_freq=3)
    memory = filled_memory(OBS, agent.action_spaces)
    losses = [agent.learn(memory.sample(8, agent.rng)) for _ in range(6)]
    assert ["actor" in loss for loss in losses] == [False, False, True, False, False, True]


def test_dict_observations_learn_through_a_multi_input_critic() -> None:
    agents = [MATD3(DICT_OBS, ACTIONS["mixed"], net_config=NET, seed=i, batch_size=8) for i in range(2)]
    assert set(agents[0].joint_observation_space.spaces) == {"speaker_0.pos", "speaker_0.goal", "listener_0"}
    memory = filled_memory(DICT_OBS, agents[0].action_spaces)
    group = MemberGroup(agents)
    losses = MATD3.learn_population(group, memory.sample_population(agents, [True, True]), [True, True])
    assert all(loss is not None and np.isfinite(loss["critic"]) for loss in losses)
