"""Where and how a distributed run is placed (validated before anything starts)."""

from __future__ import annotations

from dataclasses import dataclass

from agile_core.distributed.errors import BackendError

BACKENDS = ("local", "ray")
"""Backends `LocalTrainer(backend=...)` and `agile train --backend` accept."""


@dataclass(frozen=True)
class RayOptions:
    """Placement of a Ray run.

    Attributes:
        address: Cluster to attach to (``ray://host:10001``, ``host:6379`` or ``auto``); None
            starts a local Ray instance for the run and stops it afterwards (or uses the one
            this process already initialised).
        workers: Number of worker actors (None: one per member, capped by the CPUs the cluster
            has for `cpus_per_worker`).
        cpus_per_worker: CPUs each actor reserves (also its torch thread count, at least 1).
        gpus_per_worker: GPUs each actor reserves (needed for ``device="cuda"``).
        num_cpus: CPUs of the local instance started for the run (None: all of this machine's).
        max_retries: How often one member's phase or evaluation is retried on a fresh actor
            after its worker died, before the run fails.
    """

    address: str | None = None
    workers: int | None = None
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    num_cpus: int | None = None
    max_retries: int = 3

    def __post_init__(self) -> None:
        problems = []
        if self.workers is not None and (isinstance(self.workers, bool) or self.workers < 1):
            problems.append(f"workers must be >= 1, got {self.workers!r}")
        if self.cpus_per_worker <= 0:
            problems.append(f"cpus_per_worker must be > 0, got {self.cpus_per_worker!r}")
        if self.gpus_per_worker < 0:
            problems.append(f"gpus_per_worker must be >= 0, got {self.gpus_per_worker!r}")
        if self.num_cpus is not None and self.num_cpus < 1:
            problems.append(f"num_cpus must be >= 1, got {self.num_cpus!r}")
        if self.num_cpus is not None and self.address is not None:
            problems.append("num_cpus sizes a local Ray instance; it cannot be combined with address")
        if self.max_retries < 0:
            problems.append(f"max_retries must be >= 0, got {self.max_retries!r}")
        if problems:
            raise BackendError("ray backend: " + "; ".join(problems))

    def worker_count(self, members: int, cluster_cpus: float, cluster_gpus: float) -> int:
        """Actors to start for `members` members on a cluster with these resources; BackendError
        when an explicit `workers` cannot all be placed."""
        fit = int(cluster_cpus // self.cpus_per_worker)
        if self.gpus_per_worker > 0:
            fit = min(fit, int(cluster_gpus // self.gpus_per_worker))
        if self.workers is None:
            if fit < 1:
                raise BackendError(f"ray backend: a worker needs {self.cpus_per_worker:g} CPU and "
                                   f"{self.gpus_per_worker:g} GPU; the cluster has {cluster_cpus:g} CPUs and "
                                   f"{cluster_gpus:g} GPUs")
            return max(1, min(members, fit))
        if self.workers > fit:
            raise BackendError(f"ray backend: {self.workers} workers x ({self.cpus_per_worker:g} CPU, "
                               f"{self.gpus_per_worker:g} GPU) do not fit the cluster ({cluster_cpus:g} CPUs, "
                               f"{cluster_gpus:g} GPUs): lower the workers or the resources per worker")
        return min(self.workers, members)
