"""The one error type of dataset loading, validation and writing."""

from __future__ import annotations

__all__ = ["DatasetError"]


class DatasetError(ValueError):
    """A dataset that cannot be read, written or used; the message names the source (file or
    Minari id), the field and the shapes involved, ready to print as one line."""
