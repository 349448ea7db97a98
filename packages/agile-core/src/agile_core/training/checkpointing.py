"""Population checkpoints (every agent, the evolution state, loop counters, RNGs, buffers), saved
periodically during training, and resuming a run from one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from agile_core.algorithms.base import EvolvableAlgorithm
from agile_core.algorithms.persistence import (
    agent_state,
    algorithm_class,
    decode_argument,
    restore_agent,
)
from agile_core.algorithms.saved_state import rebuilding
from agile_core.checkpoint import (
    CheckpointError,
    CheckpointManager,
    capture_rng_state,
    inspect_checkpoint,
    is_complete_checkpoint,
    read_checkpoint,
    restore_rng_state,
)

POPULATION_KIND = "population"


class PopulationCheckpoint:
    """What a population checkpoint restores: agents, evolution state, loop counters, buffers."""

    def __init__(self, agents: list[EvolvableAlgorithm], evolution: dict[str, Any], loop: dict[str, Any],
                 buffers: dict[str, Any], path: Path) -> None:
        self.agents = agents
        self.evolution = evolution
        self.loop = loop
        self.buffers = buffers
        self.path = path


def population_state(agents: list[EvolvableAlgorithm], evolution: Mapping[str, Any], loop: Mapping[str, Any],
                     buffers: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, parts) of a whole run: every agent, selection/mutation state, counters, RNGs."""
    metas, parts = [], {}
    for position, agent in enumerate(agents):
        meta, tensors = agent_state(agent)
        metas.append(meta)
        parts[f"agent_{position}"] = tensors
    parts["rng"] = capture_rng_state()
    for name, state in (buffers or {}).items():
        parts[f"buffer_{name}"] = state
    metadata = {"kind": POPULATION_KIND, "agents": metas, "evolution": dict(evolution), "loop": dict(loop),
                "buffers": sorted((buffers or {}).keys())}
    return metadata, parts


def load_population(path: str | Path, device: torch.device | str = "cpu", restore_rng: bool = True,
                    weights_only: bool = False) -> PopulationCheckpoint:
    """Rebuild every agent of a population checkpoint (resume; or `weights_only` for a warm start)."""
    with read_checkpoint(path, map_location=device) as checkpoint:
        meta = checkpoint.metadata
        if meta.get("kind") != POPULATION_KIND:
            raise CheckpointError(str(path), f"not a population checkpoint (kind={meta.get('kind')!r})")
        saved_agents = meta.get("agents")
        if not isinstance(saved_agents, list) or not saved_agents or not all(isinstance(a, dict) for a in saved_agents):
            raise CheckpointError(str(path), "agents must be a non-empty list of agent objects")
        agents = []
        for position, agent_meta in enumerate(saved_agents):
            with rebuilding(checkpoint.path, f"agents[{position}]"):
                klass = algorithm_class(str(agent_meta.get("algorithm")), EvolvableAlgorithm)
                args = decode_argument(agent_meta["init_args"], device)
                agent = klass(**args)
                restore_agent(agent, agent_meta, checkpoint.part(f"agent_{position}"), weights_only=weights_only)
            agents.append(agent)
        buffers = {name: checkpoint.part(f"buffer_{name}") for name in meta.get("buffers", [])}
        if restore_rng and not weights_only:
            restore_rng_state(checkpoint.part("rng"))
        return PopulationCheckpoint(agents, meta["evolution"], meta["loop"], buffers, Path(checkpoint.path))


class RunCheckpointer:
    """Saves the whole run every `every` steps (per agent) under `path`, numbered or overwritten."""

    def __init__(self, path: str | Path | None, every: int | None = None, overwrite: bool = False,
                 save_buffers: bool = False) -> None:
        self.root = Path(path) if path is not None else None
        self.every = every
        self.save_buffers = save_buffers
        self.manager = CheckpointManager(self.root, overwrite=overwrite) if self.root is not None else None
        self._last_saved_block = 0

    def due(self, step: int) -> bool:
        """Whether `step` reached a new multiple of `every` since the last save (or the start)."""
        if self.manager is None or not self.every:
            return False
        return step // self.every > self._last_saved_block

    def start_from(self, step: int) -> None:
        """On resume: count blocks from `step`, so the next save is at the next multiple of `every`."""
        if self.every:
            self._last_saved_block = step // self.every

    def save(self, step: int, agents: list[Any], evolution: Mapping[str, Any], loop: Mapping[str, Any],
             buffers: Mapping[str, Any] | None = None) -> Path | None:
        """Write a checkpoint now (atomically); returns its directory."""
        if self.manager is None:
            return None
        metadata, parts = population_state(agents, evolution, loop, buffers if self.save_buffers else None)
        path = self.manager.save(step, parts, metadata)
        if self.every:
            self._last_saved_block = step // self.every
        return path


class ResumeMismatchError(ValueError):
    """A checkpoint the run cannot resume from: saved by another run (another algorithm, population
    size or environment), or already at the end of the run's step budget."""


def resume_mismatches(saved: list[Any], current: list[Any], same_size: bool = True) -> list[str]:
    """How `saved` (a checkpoint's population) differs from `current` (the one the manifest
    builds) in algorithm, population size (unless not `same_size`) or spaces, naming both values."""
    problems = []
    if type(saved[0]).__name__ != type(current[0]).__name__:
        problems.append(f"algorithm: the checkpoint has {type(saved[0]).__name__}, "
                        f"the manifest {type(current[0]).__name__}")
    if same_size and len(saved) != len(current):
        problems.append(f"population size: the checkpoint has {len(saved)}, the manifest {len(current)}")
    for name in ("observation_space", "action_space", "observation_spaces", "action_spaces"):
        before, now = getattr(saved[0], name, None), getattr(current[0], name, None)
        if before is not None and now is not None and before != now:
            problems.append(f"{name} (environment): the checkpoint has {_brief_space(before)}, "
                            f"the manifest {_brief_space(now)}")
    return problems


def check_resume_matches(saved: list[Any], current: list[Any]) -> None:
    """ResumeMismatchError when `current` cannot resume from `saved` (see `resume_mismatches`)."""
    problems = resume_mismatches(saved, current)
    if problems:
        raise ResumeMismatchError("cannot resume: the checkpoint was saved by another run; " + "; ".join(problems))


def _brief_space(space: Any) -> str:
    """A space in one short line (a Box by shape and dtype, not its bounds)."""
    if isinstance(space, dict):
        return "{" + ", ".join(f"{k}: {_brief_space(v)}" for k, v in space.items()) + "}"
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if type(space).__name__ == "Box":
        return f"Box(shape={tuple(shape or ())}, {dtype})"
    return " ".join(repr(space).split())


def resolve_run_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, the latest complete checkpoint inside a checkpoint folder, or the
    latest checkpoint of a run directory (its ``checkpoints`` folder)."""
    target = Path(path)
    if is_complete_checkpoint(target):
        return target
    if (target / "manifest.json").is_file():  # a checkpoint itself, but damaged: say what is wrong
        inspect_checkpoint(target)
    if (target / "checkpoints").is_dir() and not is_complete_checkpoint(target / "checkpoints"):
        try:
            return resolve_run_checkpoint(target / "checkpoints")
        except CheckpointError:
            pass
    if target.is_dir():
        numbered = CheckpointManager(target).latest()
        overwritten = CheckpointManager(target, overwrite=True).latest()
        candidates = [p for p in (numbered, overwritten) if p is not None]
        if candidates:
            return max(candidates, key=lambda p: p.stat().st_mtime_ns)
    if (target / "manifest.resolved.json").is_file():
        raise CheckpointError(str(path), "this run directory holds no run checkpoint (a run saves one when it "
                                         "ends or on Ctrl-C; this one was killed before that, came from an older "
                                         "agile, or wrote them to --checkpoint-path): give that folder, or "
                                         "RUN_DIR/elite")
    raise CheckpointError(str(path), "no complete checkpoint found here")


def resume_run(path: str | Path, device: str = "cpu", weights_only: bool = False) -> PopulationCheckpoint:
    """Load a run checkpoint for `resume_from_checkpoint` (or, weights only, `load_weights_from`)."""
    return load_population(resolve_run_checkpoint(path), device=device, weights_only=weights_only)
