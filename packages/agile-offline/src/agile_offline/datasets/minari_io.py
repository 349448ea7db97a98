"""Local Minari datasets: load (never download) and atomic write without jax.

Writing goes through `minari.data_collector.EpisodeBuffer` and
`minari.create_dataset_from_buffers(..., data_format="hdf5")` (Minari's `DataCollector` needs
jax). The dataset is built in a hidden temporary folder inside the Minari data path and renamed
into place, so an exception leaves no half dataset that Minari would list.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from agile_offline.datasets.errors import DatasetError
from agile_offline.datasets.transitions import Observations, TransitionData, from_arrays

__all__ = ["check_minari_id", "load_minari", "minari_metadata", "minari_root", "write_minari"]

# Minari 0.5's rule, ``(namespace/)name-v<version>``, with the version made mandatory (Minari's own
# parser fails on ids without one).
_ID_RE = re.compile(r"^(?:(?P<namespace>[-_\w][-_\w/]*[-_\w]+)/)?(?P<name>[-_\w]+?)-v(?P<version>\d+)$")
_ENV_LOCK = threading.Lock()


def minari_root() -> Path:
    """Minari's local data path: ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``."""
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def check_minari_id(dataset_id: str) -> str:
    """`dataset_id` if it is a valid Minari id (``[namespace/]name-v<N>``), else `DatasetError`."""
    if not isinstance(dataset_id, str) or not _ID_RE.fullmatch(dataset_id):
        raise DatasetError(f"Minari id {dataset_id!r} is malformed: ids look like `namespace/name-v0` "
                           f"(letters, digits, `-` and `_`; the namespace is optional, the version is not)")
    return dataset_id


def _local_ids(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.parent.relative_to(root).as_posix() for p in root.rglob("data")
                  if p.is_dir() and not any(part.startswith(".") for part in p.relative_to(root).parts))


def _episode_arrays(episode: dict[str, Any], dataset_id: str) -> tuple[Observations, Observations]:
    obs = episode["observations"]
    if isinstance(obs, tuple):
        raise DatasetError(f"Minari dataset {dataset_id}: Tuple observations are not supported (use Box or Dict)")
    if isinstance(obs, dict):
        if any(isinstance(v, dict | tuple) for v in obs.values()):
            raise DatasetError(f"Minari dataset {dataset_id}: nested dict observations are not supported")
        return ({k: np.asarray(v)[:-1] for k, v in obs.items()}, {k: np.asarray(v)[1:] for k, v in obs.items()})
    array = np.asarray(obs)
    return array[:-1], array[1:]


def _concat(parts: list[Observations]) -> Observations:
    first = parts[0]
    if isinstance(first, dict):
        return {key: np.concatenate([p[key] for p in parts if isinstance(p, dict)]) for key in first}
    return np.concatenate([p for p in parts if isinstance(p, np.ndarray)])


def load_minari(dataset_id: str) -> TransitionData:
    """All episodes of a local Minari dataset as one flat table (``observations[:-1]`` /
    ``observations[1:]`` per episode). Never downloads: a dataset missing from the local Minari
    data path raises `DatasetError` saying where it looked and how to create one."""
    check_minari_id(dataset_id)
    root = minari_root()
    source = f"Minari dataset {dataset_id}"
    if not (root / dataset_id / "data").is_dir():
        known = _local_ids(root)
        listing = f"local datasets: {', '.join(known)}" if known else "it holds no datasets"
        raise DatasetError(
            f"{source}: not found in the local Minari data path {root} (set by MINARI_DATASETS_PATH, default "
            f"~/.minari/datasets; {listing}); nothing is downloaded: create it with "
            f"`agile dataset record --env ENV_ID --episodes N --minari-id {dataset_id}`")
    import minari

    try:
        dataset = minari.load_dataset(dataset_id, download=False)
        episodes = list(dataset.storage.get_episodes(dataset.episode_indices))
    except Exception as exc:
        raise DatasetError(f"{source}: cannot be read from {root / dataset_id} ({type(exc).__name__}: {exc})") from exc
    if not episodes:
        raise DatasetError(f"{source}: the dataset is empty (0 episodes)")
    obs_parts, next_parts = zip(*(_episode_arrays(ep, dataset_id) for ep in episodes), strict=True)
    for field in ("actions",):
        if any(isinstance(ep[field], dict | tuple) for ep in episodes):
            raise DatasetError(f"{source}: dict/tuple actions are not supported")
    return from_arrays(
        source,
        observations=_concat(list(obs_parts)),
        actions=np.concatenate([np.asarray(ep["actions"]) for ep in episodes]),
        rewards=np.concatenate([np.asarray(ep["rewards"], dtype=np.float64) for ep in episodes]),
        next_observations=_concat(list(next_parts)),
        terminations=np.concatenate([np.asarray(ep["terminations"], dtype=bool) for ep in episodes]),
        truncations=np.concatenate([np.asarray(ep["truncations"], dtype=bool) for ep in episodes]),
    )


def minari_metadata(dataset_id: str) -> dict[str, Any]:
    """The descriptive metadata of a local Minari dataset (id, sizes, environment, algorithm,
    description, author), for summaries; empty when it cannot be read."""
    from minari.dataset.minari_storage import MinariStorage

    try:
        raw = MinariStorage.read_raw_metadata(minari_root() / check_minari_id(dataset_id) / "data")
    except Exception:
        return {}
    keep = ("dataset_id", "total_episodes", "total_steps", "algorithm_name", "description", "author",
            "minari_version")
    meta = {key: raw[key] for key in keep if key in raw}
    env_spec = raw.get("env_spec")
    if isinstance(env_spec, str):
        with suppress(ValueError, AttributeError):
            meta["env_id"] = json.loads(env_spec).get("id")
    return meta


def _take(obs: Observations, index: Any) -> Observations:
    if isinstance(obs, dict):
        return {key: value[index] for key, value in obs.items()}
    return obs[index]


def _first_break(data: TransitionData) -> int | None:
    """The first row ``i`` inside an episode (not done) whose next observation is not row
    ``i + 1``'s observation, or None when every episode is one contiguous chain."""
    pairs = (list(zip(data.observations.values(), data.next_observations.values(), strict=True))
             if isinstance(data.observations, dict) and isinstance(data.next_observations, dict)
             else [(data.observations, data.next_observations)])
    broken = np.zeros(len(data) - 1, dtype=bool)
    for obs, nxt in pairs:
        a, b = np.asarray(nxt)[:-1], np.asarray(obs)[1:]
        differ = a != b
        if a.dtype.kind == "f":
            differ &= ~(np.isnan(a) & np.isnan(b))
        broken |= differ.reshape(len(broken), -1).any(axis=1)
    broken &= ~data.dones[:-1]
    rows = np.flatnonzero(broken)
    return int(rows[0]) if rows.size else None


def _episode_buffers(data: TransitionData, dataset_id: str) -> list[Any]:
    from minari.data_collector import EpisodeBuffer

    ends = list(np.flatnonzero(data.dones) + 1)
    if not ends or ends[-1] != len(data):
        ends.append(len(data))  # a trailing unfinished episode is kept, unflagged, as Minari allows
    row = _first_break(data)
    if row is not None:
        raise DatasetError(
            f"Minari dataset {dataset_id}: `next_observations` row {row} differs from `observations` row "
            f"{row + 1} although row {row} does not end its episode; Minari stores each episode as one "
            f"observation sequence, so episodes must be contiguous runs of rows")
    buffers, start = [], 0
    for index, stop in enumerate(ends):
        last = _take(data.next_observations, slice(stop - 1, stop))
        first = _take(data.observations, slice(start, stop))
        obs = ({k: np.concatenate([first[k], last[k]]) for k in first}
               if isinstance(first, dict) and isinstance(last, dict)
               else np.concatenate([first, last]))
        buffers.append(EpisodeBuffer(
            id=index, observations=obs, actions=data.actions[start:stop], rewards=data.rewards[start:stop],
            terminations=data.terminations[start:stop], truncations=data.truncations[start:stop]))
        start = stop
    return buffers


@contextmanager
def _datasets_path(path: Path) -> Iterator[None]:
    """Point Minari at `path` for the duration (Minari reads the variable on every call)."""
    with _ENV_LOCK:
        previous = os.environ.get("MINARI_DATASETS_PATH")
        os.environ["MINARI_DATASETS_PATH"] = str(path)
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("MINARI_DATASETS_PATH", None)
            else:
                os.environ["MINARI_DATASETS_PATH"] = previous


def _copy_namespace_metadata(built: Path, root: Path, dataset_id: str) -> None:
    parts = dataset_id.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        relative = Path(*parts[:depth])
        (root / relative).mkdir(parents=True, exist_ok=True)
        meta = built / relative / "namespace_metadata.json"
        if meta.exists() and not (root / relative / meta.name).exists():
            shutil.copyfile(meta, root / relative / meta.name)


def write_minari(data: TransitionData, dataset_id: str, env_id: str | None = None, *, observation_space: Any,
                 action_space: Any, env_config: dict[str, Any] | None = None, algorithm_name: str | None = None,
                 description: str | None = None, author: str | None = None) -> Path:
    """Write `data` as the local Minari dataset `dataset_id` and return its folder.

    Episodes are the contiguous runs of rows ending at a termination or truncation (a trailing
    unfinished run becomes an unflagged last episode). `env_id` (with `env_config`) is recorded as
    the dataset's environment so `MinariDataset.recover_environment()` works; the spaces are the
    dataset's own. Images are stored losslessly (no JPEG). Raises `DatasetError` for a malformed
    or existing id and for invalid data; an exception while writing leaves nothing behind.
    """
    check_minari_id(dataset_id)
    root = minari_root()
    target = root / dataset_id
    source = f"Minari dataset {dataset_id}"
    if target.exists():
        raise DatasetError(f"{source}: already exists at {target}; choose another id or version, or delete it "
                           f"(minari.delete_dataset)")
    data = from_arrays(source, observations=data.observations, actions=data.actions, rewards=data.rewards,
                       next_observations=data.next_observations, terminations=data.terminations,
                       truncations=data.truncations)
    buffers = _episode_buffers(data, dataset_id)
    import gymnasium as gym
    import minari

    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=root, prefix=".agile-staging-"))
    except OSError as exc:
        raise DatasetError(f"{source}: cannot write in the Minari data path {root} ({exc})") from exc
    env = gym.make(env_id, **(env_config or {})) if env_id is not None else None
    try:
        with _datasets_path(staging), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # minari nags about unset author, permalink, ...
            minari.create_dataset_from_buffers(
                dataset_id, buffer=buffers, env=env, observation_space=observation_space,
                action_space=action_space, algorithm_name=algorithm_name, description=description,
                author=author, data_format="hdf5", jpeg_encoding=False)
        _copy_namespace_metadata(staging, root, dataset_id)
        try:
            os.rename(staging / dataset_id, target)
        except OSError as exc:
            raise DatasetError(f"{source}: cannot move the new dataset to {target} ({exc})") from exc
    finally:
        if env is not None:
            env.close()
        shutil.rmtree(staging, ignore_errors=True)
    return target
