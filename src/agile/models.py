"""Manifest models (pydantic specs), as in `agilerl.models`."""

from agile_core.specs import *  # noqa: F403 - the specs package defines the public names
from agile_core.specs import __all__ as _spec_names
from agile_core.specs.manifest import TrainingManifest

__all__ = [*_spec_names, "TrainingManifest"]
