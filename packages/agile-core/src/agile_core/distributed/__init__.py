"""Training beyond one process.

* ``backend="ray"`` (:func:`agile_core.distributed.ray_loop.train_with_ray`): population members
  train their phases in Ray actors on one machine or a cluster; the driver keeps the population,
  runs selection, mutation, reporting and checkpoints exactly as the local loop does. Agents
  travel as agent-checkpoint bytes (safetensors + JSON, :mod:`agile_core.distributed.agent_bytes`),
  never pickled.

Nothing here imports Ray (or torch) at import time; Ray is an optional extra: ``agile-core[ray]``.
"""

from agile_core.distributed.errors import BackendError
from agile_core.distributed.options import BACKENDS, RayOptions

__all__ = ["BACKENDS", "BackendError", "RayOptions"]
