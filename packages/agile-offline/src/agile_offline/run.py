"""What the offline loop needs from a manifest: the dataset, loaded once into a replay memory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agile_core.buffers import ReplayBuffer
from agile_core.errors import ManifestError, ManifestIssue
from agile_core.specs.manifest import TrainingManifest
from agile_offline.datasets import (
    DatasetError,
    TransitionData,
    check_spaces,
    load_dataset,
    load_minari,
)
from agile_offline.specs.env import OfflineEnvSpec
from agile_offline.training import fill_memory, run_offline

if TYPE_CHECKING:
    from agile_core.training.options import RunOptions

__all__ = ["load_manifest_dataset", "run_loop"]


def load_manifest_dataset(spec: OfflineEnvSpec, base_dir: str | Path | None, env: Any) -> TransitionData:
    """The dataset the environment section names, checked against the env's spaces; a problem
    is a ManifestError on the field that named the dataset."""
    if spec.minari_dataset_id is not None:
        field, source = "minari_dataset_id", spec.minari_dataset_id
    else:
        assert spec.dataset_path is not None
        field = "dataset_path"
        path = Path(spec.dataset_path).expanduser()
        source = str(path if path.is_absolute() or base_dir is None else Path(base_dir) / path)
    try:
        data = load_minari(source) if field == "minari_dataset_id" else load_dataset(source)
        check_spaces(data, env.single_observation_space, env.single_action_space, source)
    except DatasetError as error:
        raise ManifestError([ManifestIssue(("environment", field), str(error))]) from error
    return data


def run_loop(manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
             device: str) -> tuple[list[Any], list[float]]:
    """Paradigm hook ``run_loop``: :func:`~agile_offline.training.run_offline` on a replay memory
    holding the whole dataset the environment section names (sized to it)."""
    spec = manifest.environment
    assert isinstance(spec, OfflineEnvSpec)
    data = load_manifest_dataset(spec, manifest.base_dir, env)
    memory = ReplayBuffer(len(data), env.single_observation_space, env.single_action_space, device=device)
    fill_memory(memory, data)
    return run_offline(env, manifest.environment.name, manifest.algorithm.name, population, options, memory)
