"""A population trained data-parallel through ``LocalTrainer(accelerator=...)``.

Run as ``accelerate launch --multi_gpu --num_processes 2 tests/distributed/data_parallel_run.py
OUT MANIFEST [KEY=VALUE...]`` (a manifest file and overrides). Each process writes
``OUT/rank<r>.json``: its members' fitness histories, steps, indices and a digest of their
networks and optimizer states, which must be the same on every process, and the gloo threads
still running after the process group was closed (none).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

from agile_core.algorithms.persistence import agent_state
from agile_core.checkpoint import flatten_state
from agile_core.distributed.data_parallel import close_process_group
from agile_core.overrides import apply_overrides
from agile_core.specs.manifest import validate_source
from agile_core.trainer import LocalTrainer
from agile_core.yaml_source import read_manifest_file


def state_digest(agent: object) -> str:
    """A digest of the agent's saved tensors, its random generators left out."""
    digest = hashlib.sha256()
    flat, _ = flatten_state(agent_state(agent)[1])
    for key in sorted(flat):
        if key.startswith(("networks/", "optimizers/")):
            digest.update(key.encode())
            digest.update(flat[key].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def gloo_threads() -> list[str]:
    """Names of this process's threads that belong to a gloo group (none once it is freed)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
    return sorted(name for name in names if "gloo" in name)


def main(out: Path, manifest_path: str, overrides: list[str]) -> None:
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    manifest = validate_source(apply_overrides(read_manifest_file(manifest_path), overrides))
    trainer = LocalTrainer.from_manifest(manifest, accelerator=accelerator)
    try:
        population, fitnesses = trainer.train(verbose=False, checkpoint_steps=manifest.training.evo_steps,
                                              checkpoint_path=str(out / "checkpoints"))
    finally:
        close_process_group(accelerator)
    record = {"fitness": [list(agent.fitness) for agent in population], "steps": [agent.steps for agent in population],
              "indices": [agent.index for agent in population], "states": [state_digest(a) for a in population],
              "last": fitnesses, "gloo_threads_after_close": gloo_threads()}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{accelerator.process_index}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
