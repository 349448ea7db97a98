"""Observation pieces over all sub-envs: what each agent of a team sees of other entities.

A *selection* names, for each agent of a team, the entities it observes: a static
``[team, m]`` index array (full observability), or ``[n, team, m]`` per sub-env from `nearest`
(mpe2's partial observability: the nearest ones, closest first, ``-1`` for zero-padded slots).
"""

from __future__ import annotations

import numpy as np

from agile_marl.mpe.core import BatchedWorld, length


def others(team: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``[team, m]``: for each agent of `team` the entities of `pool` but itself, in order (the
    agents of `team` are all in `pool`, or none is)."""
    return np.array([[e for e in pool if e != agent] for agent in team], dtype=np.intp).reshape(len(team), -1)


def repeat(team: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``[team, len(pool)]``: every agent of `team` observes all of `pool`."""
    return np.broadcast_to(np.asarray(pool, dtype=np.intp), (len(team), len(pool)))


def nearest(world: BatchedWorld, team: np.ndarray, selection: np.ndarray, count: int | None) -> np.ndarray:
    """`selection` itself when `count` is None, else per sub-env its `count` entities nearest to
    each agent (closest first, by mpe2's ``argsort`` of the distances), ``-1`` past its end."""
    if count is None:
        return selection
    delta = world.pos[:, selection] - world.pos[:, team, None]
    order = np.argsort(length(delta), axis=-1)[..., :count]
    chosen = selection[np.arange(len(team))[None, :, None], order]
    if chosen.shape[-1] < count:
        padding = np.full((*chosen.shape[:-1], count - chosen.shape[-1]), -1, dtype=np.intp)
        chosen = np.concatenate([chosen, padding], axis=-1)
    return chosen


def gather(values: np.ndarray, selection: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """``[n, team, m * width]``: ``values [n, entities, width]`` of the selected entities
    (zeros at ``-1`` slots, and where `where` — ``[entities]`` bool — is False for the entity)."""
    n = values.shape[0]
    if selection.ndim == 2:
        picked = values[:, selection]
        if where is not None:
            picked = picked * where[selection][None, :, :, None]
    else:
        valid = selection >= 0
        if where is not None:
            valid &= where[np.maximum(selection, 0)]
        picked = values[np.arange(n)[:, None, None], np.maximum(selection, 0)] * valid[..., None]
    return picked.reshape(n, selection.shape[-2], -1)


def relative(world: BatchedWorld, team: np.ndarray, selection: np.ndarray) -> np.ndarray:
    """``[n, team, 2m]``: positions of the selected entities relative to each agent of `team`
    (zeros at ``-1`` slots)."""
    n = world.n
    if selection.ndim == 2:
        delta = world.pos[:, selection] - world.pos[:, team, None]
        return delta.reshape(n, len(team), -1)
    picked = world.pos[np.arange(n)[:, None, None], np.maximum(selection, 0)]
    delta = (picked - world.pos[:, team, None]) * (selection >= 0)[..., None]
    return delta.reshape(n, len(team), -1)


def distances(world: BatchedWorld, rows: np.ndarray | slice, columns: np.ndarray | slice) -> np.ndarray:
    """``[n, len(rows), len(columns)]``: Euclidean distances between two sets of entities."""
    delta = world.pos[:, rows, None] - world.pos[:, None, columns]
    return length(delta)


def touching(world: BatchedWorld, rows: np.ndarray | slice, columns: np.ndarray | slice) -> np.ndarray:
    """``[n, len(rows), len(columns)]`` bool: the entities overlap (mpe2's ``is_collision``)."""
    size = world.layout.size
    return distances(world, rows, columns) < size[rows][:, None] + size[columns][None, :]
