"""The on-policy paradigm's trainer hook: the loop call of a manifest run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agile_core.specs.manifest import TrainingManifest

if TYPE_CHECKING:
    from agile_core.training.options import RunOptions

__all__ = ["run_loop"]


def run_loop(manifest: TrainingManifest, env: Any, population: list[Any], options: RunOptions,
             device: str) -> tuple[list[Any], list[float]]:
    """Paradigm hook ``run_loop``: :func:`~agile_onpolicy.training.run_on_policy` (the loop
    needs nothing from the manifest beyond the shared options)."""
    from agile_onpolicy.training import run_on_policy

    return run_on_policy(env, manifest.environment.name, manifest.algorithm.name, population, options)
