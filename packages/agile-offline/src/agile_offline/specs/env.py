"""The environment section of offline training: an evaluation env plus one dataset source."""

from __future__ import annotations

from pydantic import Field, model_validator

from agile_core.specs._base import field_error
from agile_core.specs.env import GymEnvSpec

__all__ = ["OfflineEnvSpec"]


class OfflineEnvSpec(GymEnvSpec):
    """A Gymnasium environment to evaluate in, and the dataset to learn from: exactly one of
    `minari_dataset_id` (a local Minari dataset) or `dataset_path` (an HDF5 file)."""

    num_envs: int = Field(default=8, ge=1, le=65_536)
    """Sub-environments of the evaluation env."""
    minari_dataset_id: str | None = Field(default=None, min_length=1)
    """Id of a Minari dataset already in the local Minari data path (nothing is downloaded)."""
    dataset_path: str | None = Field(default=None, min_length=1)
    """HDF5 file (relative to the manifest) with `observations`, `actions`, `rewards`,
    `terminations` and `truncations` (or `terminals`) and `next_observations`."""

    @model_validator(mode="after")
    def _one_source(self) -> OfflineEnvSpec:
        if (self.minari_dataset_id is None) == (self.dataset_path is None):
            raise field_error("dataset_path", "give exactly one dataset source: `minari_dataset_id` or "
                                              "`dataset_path`" + (" (both are set)" if self.dataset_path else ""))
        return self
