"""Agent ids and agent groups: agents whose ids share a prefix (`speaker_0`, `speaker_1`) form a group."""

from __future__ import annotations

from collections.abc import Iterable


def group_id(agent_id: str) -> str:
    """The group of an agent: its id without a trailing ``_<number>`` (``adversary_1`` -> ``adversary``);
    an id without one is its own group."""
    prefix, sep, suffix = agent_id.rpartition("_")
    return prefix if sep and prefix and suffix.isdigit() else agent_id


def agent_groups(agent_ids: Iterable[str]) -> dict[str, list[str]]:
    """``{group: [agent ids]}`` in order of first appearance (ids in their given order)."""
    groups: dict[str, list[str]] = {}
    for agent_id in agent_ids:
        groups.setdefault(group_id(agent_id), []).append(agent_id)
    return groups
