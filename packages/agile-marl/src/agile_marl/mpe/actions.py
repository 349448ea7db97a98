"""Action spaces of the batched MPE and the decoding of action rows into forces and utterances.

As in mpe2: a movable agent has 5 movement actions ``[no_action, left, right, down, up]``; a
speaking agent adds its ``dim_c`` utterances (Discrete: ``movement + 5 * word``; continuous:
``[5 movement weights, dim_c utterance values]`` in ``[0, 1]``, clipped). The force is the
movement times the agent's sensitivity (``accel``, else 5).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from agile_marl.mpe.core import DIM_P, WorldLayout

MOVE_ACTIONS = DIM_P * 2 + 1
_MOVES = np.array([[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]])


def action_size(movable: bool, silent: bool, dim_c: int, continuous: bool) -> int:
    """The number of discrete actions, or the length of a continuous action (mpe2's rule)."""
    size = MOVE_ACTIONS if movable else (0 if continuous else 1)
    if not silent:
        size = size + dim_c if continuous else size * dim_c
    return size


def action_spaces(layout: WorldLayout, continuous: bool) -> dict[str, spaces.Space]:
    """Each agent's action space: ``Discrete(k)``, or ``Box(0, 1, (k,), float32)``."""
    result: dict[str, spaces.Space] = {}
    for agent in layout.agents:
        size = action_size(agent.movable, agent.silent, layout.dim_c, continuous)
        result[agent.name] = spaces.Box(low=0, high=1, shape=(size,)) if continuous else spaces.Discrete(size)
    return result


class _Group:
    """Agents with the same action layout (movable, silent), decoded together."""

    def __init__(self, layout: WorldLayout, indices: list[int], continuous: bool) -> None:
        first = layout.agents[indices[0]]
        self.names = [layout.agent_names[i] for i in indices]
        self.index = np.array(indices, dtype=np.intp)
        self.movable, self.speaks = first.movable, not first.silent
        self.size = action_size(first.movable, first.silent, layout.dim_c, continuous)
        self.sensitivity = layout.sensitivity[self.index][None, :, None]
        self.comm_start = MOVE_ACTIONS if first.movable else 0


class ActionDecoder:
    """Action rows of every agent -> forces ``u [n, agents, 2]`` and utterances ``c [n, agents, dim_c]``."""

    def __init__(self, layout: WorldLayout, continuous: bool, n: int) -> None:
        self.layout = layout
        self.continuous = continuous
        keys: dict[tuple[bool, bool], list[int]] = {}
        for i, agent in enumerate(layout.agents):
            keys.setdefault((agent.movable, agent.silent), []).append(i)
        self.groups = [_Group(layout, indices, continuous) for indices in keys.values()]
        self.u = np.zeros((n, layout.num_agents, DIM_P))
        self.c = np.zeros((n, layout.num_agents, layout.dim_c))
        self._words = np.eye(layout.dim_c)

    def decode(self, actions: dict[str, np.ndarray], acting: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Decode ``actions[agent]`` (``[n]`` ints or ``[n, k]`` floats). Rows outside `acting`
        (sub-envs that do not step) may hold anything and give zero forces there."""
        for group in self.groups:
            rows = np.stack([np.asarray(actions[name]) for name in group.names], axis=1)
            if self.continuous:
                self._continuous(group, rows, acting)
            else:
                self._discrete(group, rows, acting)
        return self.u, self.c

    def _discrete(self, group: _Group, rows: np.ndarray, acting: np.ndarray | None) -> None:
        rows = rows.astype(np.int64, copy=False)
        bad = (rows < 0) | (rows >= group.size)
        if acting is not None:
            bad &= acting[:, None]
            rows = np.where(acting[:, None], rows, 0)
        if bad.any():
            env, slot = (int(i[0]) for i in np.nonzero(bad))
            raise ValueError(f"action {int(rows[env, slot])} of agent {group.names[slot]!r} in sub-env {env} "
                             f"is not in its action space Discrete({group.size})")
        if group.movable:
            moves = rows % MOVE_ACTIONS if group.speaks else rows
            self.u[:, group.index] = _MOVES[moves] * group.sensitivity
        if group.speaks:
            words = rows // MOVE_ACTIONS if group.movable else rows
            self.c[:, group.index] = self._words[words]

    def _continuous(self, group: _Group, rows: np.ndarray, acting: np.ndarray | None) -> None:
        # float32 as the sub-env path passes them, clipped to the Box as mpe2's wrapper does
        rows = np.clip(rows.astype(np.float32, copy=False), 0, 1)
        if acting is not None:
            rows = np.where(acting[:, None, None], rows, np.float32(0))
        if group.movable:
            # the differences in float32, as mpe2 takes them from the float32 action
            self.u[:, group.index] = (rows[..., [2, 4]] - rows[..., [1, 3]]) * group.sensitivity
        if group.speaks:
            start = group.comm_start
            self.c[:, group.index] = rows[..., start:start + self.layout.dim_c]
