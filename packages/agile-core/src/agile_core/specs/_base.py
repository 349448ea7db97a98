"""Shared pydantic configuration for every spec: unknown keys are errors, docs on every field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """Base class of every manifest section: strict about unknown keys, validated on assignment."""

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        populate_by_name=True,
        use_attribute_docstrings=True,
        protected_namespaces=(),
    )
