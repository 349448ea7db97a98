"""Algorithm-free checkpoint storage: safetensors + JSON directories, written atomically.

Layout of a checkpoint directory::

    <checkpoint>/
        manifest.json          # format, format_version, created_at, versions, step,
                               # metadata, and per part: file, bytes, sha256, skeleton
        <part>.safetensors     # the tensors of one part (e.g. agent_0, buffer)

No pickle is written or read anywhere; loading validates everything before use.
"""

from agile_core.checkpoint.errors import CheckpointError
from agile_core.checkpoint.manager import CheckpointManager
from agile_core.checkpoint.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    SUPPORTED_FORMAT_VERSIONS,
    Manifest,
    PartInfo,
)
from agile_core.checkpoint.reader import (
    Checkpoint,
    inspect_checkpoint,
    is_complete_checkpoint,
    read_checkpoint,
    resolve_checkpoint_dir,
)
from agile_core.checkpoint.rng import (
    capture_generator_state,
    capture_rng_state,
    generator_from_state,
    restore_generator_state,
    restore_rng_state,
)
from agile_core.checkpoint.state import flatten_state, unflatten_state
from agile_core.checkpoint.writer import discard, recover, write_checkpoint

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SUPPORTED_FORMAT_VERSIONS",
    "Checkpoint",
    "CheckpointError",
    "CheckpointManager",
    "Manifest",
    "PartInfo",
    "capture_generator_state",
    "capture_rng_state",
    "discard",
    "flatten_state",
    "generator_from_state",
    "inspect_checkpoint",
    "is_complete_checkpoint",
    "read_checkpoint",
    "recover",
    "resolve_checkpoint_dir",
    "restore_generator_state",
    "restore_rng_state",
    "unflatten_state",
    "write_checkpoint",
]
