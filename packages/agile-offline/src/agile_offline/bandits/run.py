"""Trainer hooks of the bandits paradigm: build the env of a ``BanditEnvSpec`` and run the loop."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agile_core.specs.manifest import TrainingManifest
from agile_offline.bandits.env import BanditDataError, BanditEnv
from agile_offline.specs.bandits import BanditEnvSpec

if TYPE_CHECKING:
    from agile_core.training.options import RunOptions

__all__ = ["make_env", "run_loop"]


def make_env(env_spec: BanditEnvSpec, base_dir: str | Path | None = None, seed: int | None = None,
             num_envs: int | None = None) -> Any:
    """The bandit env of `env_spec`: a ``BanditEnv`` from its `features`/`targets` CSV files
    (relative to `base_dir`, the manifest's folder), or what its `entrypoint` returns when
    called with its `config` (and ``seed`` when it takes one). `num_envs` must be 1 or None."""
    if num_envs not in (None, 1):
        raise ValueError(f"bandit envs are not vectorised: num_envs must be 1, got {num_envs}")
    root = Path(base_dir) if base_dir is not None else Path.cwd()
    if env_spec.entrypoint is not None:
        module_name, _, attr = env_spec.entrypoint.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as error:
            raise BanditDataError(f"environment.entrypoint {env_spec.entrypoint!r} cannot be loaded: {error}") from None
        config = dict(env_spec.config)
        if seed is not None and "seed" not in config:
            try:
                return target(**config, seed=seed)
            except TypeError:
                pass
        return target(**config)
    assert env_spec.features is not None and env_spec.targets is not None  # the spec checks this
    return BanditEnv.from_csv(root / env_spec.features, root / env_spec.targets, seed=seed, name=env_spec.name)


def run_loop(manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
             device: str) -> tuple[list[Any], list[float]]:
    """Paradigm hook ``run_loop``: :func:`~agile_offline.bandits.training.run_bandits` with the
    training section's ``episode_steps`` (every agent's memory sized by the run's steps)."""
    from agile_offline.bandits.training import run_bandits

    return run_bandits(env, manifest.environment.name, manifest.algorithm.name, population, options,
                       episode_steps=manifest.training.episode_steps)
