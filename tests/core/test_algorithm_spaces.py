"""Algorithms reject unsupported spaces at construction with a precise message."""

from typing import Any, ClassVar

import numpy as np
import pytest
from gymnasium import spaces

from agile_core.algorithms import MultiAgentAlgorithm, SingleAgentAlgorithm, UnsupportedSpaceError


class DiscreteOnly(SingleAgentAlgorithm):
    supported_action_spaces: ClassVar = (spaces.Discrete,)

    def get_action(self, obs: Any, *args: Any, **kwargs: Any) -> Any:
        return np.zeros(len(obs), dtype=np.int64)

    def learn(self, *args: Any, **kwargs: Any) -> Any:
        return 0.0

    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        return 0.0


class Team(MultiAgentAlgorithm):
    supported_action_spaces: ClassVar = (spaces.Box,)

    def get_action(self, obs: Any, *args: Any, **kwargs: Any) -> Any:
        return {}

    def learn(self, *args: Any, **kwargs: Any) -> Any:
        return 0.0

    def test(self, env: Any, *args: Any, **kwargs: Any) -> float:
        return 0.0


BOX = spaces.Box(-1, 1, (3,))


def test_supported_spaces_are_accepted():
    agent = DiscreteOnly(BOX, spaces.Discrete(2), index=3)
    assert agent.index == 3 and agent.action_space.n == 2


def test_unsupported_action_space_is_named():
    with pytest.raises(UnsupportedSpaceError, match=r"DiscreteOnly does not support action space Box\(2,\); supported: Discrete"):
        DiscreteOnly(BOX, spaces.Box(-1, 1, (2,)))


def test_non_space_is_rejected():
    with pytest.raises(UnsupportedSpaceError, match=r"must be a gymnasium\.spaces\.Space, got int"):
        DiscreteOnly(4, spaces.Discrete(2))


def test_multi_agent_spaces_checked_per_agent():
    team = Team({"a": BOX, "b": BOX}, {"a": BOX, "b": BOX})
    assert team.agent_ids == ["a", "b"]
    with pytest.raises(UnsupportedSpaceError, match="action space of agent 'b'"):
        Team({"a": BOX, "b": BOX}, {"a": BOX, "b": spaces.Discrete(3)})
    with pytest.raises(UnsupportedSpaceError, match="different agents"):
        Team({"a": BOX}, {"b": BOX})
