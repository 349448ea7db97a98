"""The batched MPE world: the entities of N sub-envs as arrays, and mpe2's physics as array ops.

Entities are the agents followed by the landmarks (mpe2's ``world.entities`` order). A
`WorldLayout` holds what is fixed per scenario (sizes, masses, which entities move or collide);
a `BatchedWorld` holds the state of every sub-env with a leading sub-env axis:
``pos`` and ``vel`` ``[n, entities, 2]``, ``comm`` ``[n, agents, dim_c]`` and the scenario's
landmark assignments ``goals`` ``[n, num_goals]``.

`BatchedWorld.step` is mpe2's ``World.step`` (action forces, soft contact forces between every
colliding pair, damping, integration, speed limits, utterances) over all sub-envs at once, with
the floating-point operations in mpe2's order so that one step agrees with mpe2 to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

DIM_P = 2
"""Position dimensionality (mpe2's ``world.dim_p``)."""


@dataclass(frozen=True)
class AgentKind:
    """One agent's fixed properties (mpe2's ``Agent`` defaults)."""

    name: str
    size: float = 0.05
    movable: bool = True
    silent: bool = False
    collide: bool = True
    accel: float | None = None
    """Sensitivity of the physical action (5.0 when None, as in mpe2)."""
    max_speed: float | None = None
    mass: float = 1.0
    spawn: float = 1.0
    """Initial positions are uniform in ``[-spawn, spawn]^2``."""


@dataclass(frozen=True)
class LandmarkKind:
    """One landmark's fixed properties (mpe2's ``Landmark`` defaults)."""

    size: float = 0.05
    collide: bool = True
    movable: bool = False
    mass: float = 1.0
    max_speed: float | None = None
    spawn: float = 1.0
    """Initial positions are uniform in ``[-spawn, spawn]^2``."""


def squared_length(delta: np.ndarray) -> np.ndarray:
    """``x^2 + y^2`` over the last axis of 2-vectors (mpe2's ``np.sum(np.square(delta))``, without
    a slow reduction over a length-2 axis)."""
    return np.square(delta[..., 0]) + np.square(delta[..., 1])


def length(delta: np.ndarray) -> np.ndarray:
    """Euclidean length over the last axis of 2-vectors."""
    return np.sqrt(squared_length(delta))


def _slice_or_index(indices: np.ndarray) -> slice | np.ndarray:
    """A slice when `indices` is a contiguous range (views instead of copies), else `indices`."""
    if len(indices) and np.array_equal(indices, np.arange(indices[0], indices[-1] + 1)):
        return slice(int(indices[0]), int(indices[-1]) + 1)
    return indices


class WorldLayout:
    """What a scenario fixes about its world, as arrays over entities."""

    dt = 0.1
    damping = 0.25
    contact_force = 100.0
    contact_margin = 1e-3

    def __init__(self, agents: list[AgentKind], landmarks: list[LandmarkKind], dim_c: int = 0) -> None:
        self.agents = tuple(agents)
        self.landmarks = tuple(landmarks)
        self.dim_c = dim_c
        self.agent_names = [agent.name for agent in agents]
        self.num_agents = len(agents)
        self.num_landmarks = len(landmarks)
        kinds: list[AgentKind | LandmarkKind] = [*agents, *landmarks]
        self.num_entities = len(kinds)
        self.size = np.array([k.size for k in kinds], dtype=np.float64)
        self.movable = np.array([k.movable for k in kinds], dtype=bool)
        self.collide = np.array([k.collide for k in kinds], dtype=bool)
        self.mass = np.array([k.mass for k in kinds], dtype=np.float64)
        self.max_speed = np.array([np.inf if k.max_speed is None else k.max_speed for k in kinds], dtype=np.float64)
        self.spawn = np.array([[k.spawn] for k in kinds], dtype=np.float64)
        self.silent = np.array([a.silent for a in agents], dtype=bool)
        self.sensitivity = np.array([5.0 if a.accel is None else a.accel for a in agents], dtype=np.float64)
        self._collision_tables()
        moving = np.flatnonzero(self.movable)
        self.moving = _slice_or_index(moving)
        self.landmarks_move = bool(self.movable[self.num_agents:].any())
        self.limited = bool(np.isfinite(self.max_speed[moving]).any())

    def _collision_tables(self) -> None:
        """Pairs ``i < j`` of colliding entities, and for each colliding movable entity the pairs it
        is in, ordered by the other entity's index (the order mpe2 adds the contact forces in)."""
        colliders = [int(e) for e in np.flatnonzero(self.collide)]
        pairs = list(combinations(colliders, 2))
        self.pair_i = np.array([i for i, _ in pairs], dtype=np.intp)
        self.pair_j = np.array([j for _, j in pairs], dtype=np.intp)
        self.pair_min = self.size[self.pair_i] + self.size[self.pair_j]
        pushed = [e for e in colliders if self.movable[e]]
        index = {pair: p for p, pair in enumerate(pairs)}
        slots = [[index[(min(e, o), max(e, o))] for o in colliders if o != e] for e in pushed]
        signs = [[1.0 if e < o else -1.0 for o in colliders if o != e] for e in pushed]
        self.pushed = np.array(pushed, dtype=np.intp)
        self.push_pairs = np.array(slots, dtype=np.intp).reshape(len(pushed), max(len(colliders) - 1, 0))
        self.push_sign = np.array(signs, dtype=np.float64).reshape(self.push_pairs.shape)[None, :, :, None]
        self.has_contacts = bool(pairs) and bool(pushed)


class BatchedWorld:
    """The state of `n` sub-envs of one layout, stepped with mpe2's physics."""

    def __init__(self, layout: WorldLayout, n: int, num_goals: int = 0) -> None:
        self.layout = layout
        self.n = n
        entities, agents = layout.num_entities, layout.num_agents
        self.pos = np.zeros((n, entities, DIM_P))
        self.vel = np.zeros((n, entities, DIM_P))
        self.comm = np.zeros((n, agents, layout.dim_c))
        self.goals = np.zeros((n, num_goals), dtype=np.int64)
        self._force = np.zeros((n, entities, DIM_P))

    def step(self, u: np.ndarray, c: np.ndarray) -> None:
        """One physics step: `u` ``[n, agents, 2]`` the agents' action forces (ignored for immovable
        agents), `c` ``[n, agents, dim_c]`` their utterances (zeros for silent agents)."""
        layout = self.layout
        force = self._force
        force[:, :layout.num_agents] = u
        if layout.landmarks_move:
            force[:, layout.num_agents:] = 0.0
        if layout.has_contacts:
            self._add_contact_forces(force)
        self._integrate(force)
        self.comm[...] = c

    def _add_contact_forces(self, force: np.ndarray) -> None:
        layout = self.layout
        delta = self.pos[:, layout.pair_i] - self.pos[:, layout.pair_j]
        dist = length(delta)
        k = layout.contact_margin
        penetration = np.logaddexp(0, -(dist - layout.pair_min) / k) * k
        pair_force = layout.contact_force * delta / dist[..., None] * penetration[..., None]
        received = pair_force[:, layout.push_pairs] * layout.push_sign  # [n, pushed, others, 2]
        total = force[:, layout.pushed]
        for slot in range(received.shape[2]):  # mpe2's summation order: by the other entity's index
            total += received[:, :, slot]
        force[:, layout.pushed] = total

    def _integrate(self, force: np.ndarray) -> None:
        layout = self.layout
        moving = layout.moving
        self.pos[:, moving] += self.vel[:, moving] * layout.dt
        vel = self.vel[:, moving] * (1 - layout.damping)
        vel += (force[:, moving] / layout.mass[moving, None]) * layout.dt
        if layout.limited:
            max_speed = layout.max_speed[moving]
            speed = np.sqrt(np.square(vel[..., 0]) + np.square(vel[..., 1]))
            over = speed > max_speed
            if over.any():  # x / 1.0 * 1.0 == x: rows under the limit keep their velocity exactly
                vel = vel / np.where(over, speed, 1.0)[..., None] * np.where(over, max_speed, 1.0)[..., None]
        self.vel[:, moving] = vel

    def reset_rows(self, rows: np.ndarray, unit: np.ndarray, goals: np.ndarray) -> None:
        """Start episodes in sub-envs `rows`: positions from `unit` ``[rows, entities, 2]`` uniform
        draws in ``[0, 1)`` (``-spawn + 2 spawn * unit``: numpy's ``uniform(-spawn, spawn)``), zero
        velocities and utterances, landmark assignments `goals` ``[rows, num_goals]``."""
        spawn = self.layout.spawn
        self.pos[rows] = -spawn + (2 * spawn) * unit
        self.vel[rows] = 0.0
        self.comm[rows] = 0.0
        self.goals[rows] = goals
