"""The Ray actor that trains and evaluates population members.

A worker rebuilds the run's environment and the paradigm's phase from the manifest
(:meth:`~agile_core.registry.Paradigm.make_phase`), then serves requests from the driver: train member
`slot` for some vector steps from a seed, or evaluate it. Agents arrive and leave as agent
bytes (:mod:`agile_core.distributed.agent_bytes`). The worker keeps the members it trained
last, so their evaluation needs no second transfer.

This module does not import Ray: the driver wraps :class:`MemberWorker` with ``ray.remote``.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any


class MemberWorker:
    """Trains and evaluates members for the driver (one Ray actor)."""

    def __init__(self, manifest_data: dict[str, Any], base_dir: str, device: str, torch_threads: int) -> None:
        import torch

        from agile_core.registry import paradigm_of
        from agile_core.specs.manifest import validate_source
        from agile_core.training.envs import as_vector_env
        from agile_core.training.heap import retain_freed_memory
        from agile_core.yaml_source import ManifestSource

        torch.set_num_threads(max(1, torch_threads))
        retain_freed_memory()
        manifest = validate_source(ManifestSource(data=manifest_data, filename="<driver manifest>",
                                                  base_dir=Path(base_dir)))
        self.device = device
        paradigm = paradigm_of(manifest.algorithm.name)
        self.env = as_vector_env(paradigm.make_env(manifest.environment, base_dir=manifest.base_dir,
                                                   seed=manifest.training.seed))
        self.phase = paradigm.make_phase(manifest, self.env, device)
        self.swap_channels = bool(manifest.algorithm.hyperparameters().get("CHANNELS_LAST", False))
        self.eval_steps = manifest.training.eval_steps
        self.eval_loop = manifest.training.eval_loop
        self.held: dict[int, Any] = {}

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()

    def train(self, slot: int, agent_bytes: bytes, vector_steps: int, seed: int | None) -> tuple[bytes, dict[str, Any]]:
        """Train member `slot` for `vector_steps` from `seed` (env reset and torch, as the local
        loop seeds it); return the trained agent's bytes and the phase result."""
        from agile_core.distributed.agent_bytes import agent_from_bytes, agent_to_bytes
        from agile_core.training.generations import seed_position

        agent = agent_from_bytes(agent_bytes, self.device)
        if seed is not None:
            seed_position(self.env, seed)
        result = self.phase(slot, agent, vector_steps, lambda: False)
        self.held[slot] = agent
        return agent_to_bytes(agent), asdict(result)

    def evaluate(self, slot: int, agent_bytes: bytes | None, seed: int | None) -> float:
        """Fitness of member `slot` (the agent this worker trained last, or `agent_bytes`)."""
        from agile_core.distributed.agent_bytes import agent_from_bytes
        from agile_core.training.evolution import evaluate_population
        from agile_core.training.generations import seed_position

        if agent_bytes is not None:
            self.held[slot] = agent_from_bytes(agent_bytes, self.device)
        if slot not in self.held:
            raise LookupError(f"worker holds no member {slot}: send its bytes")
        if seed is not None:
            seed_position(self.env, seed)
        return evaluate_population([self.held[slot]], self.env, swap_channels=self.swap_channels,
                                   max_steps=self.eval_steps, loop=self.eval_loop)[0]
