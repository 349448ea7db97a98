"""Shared pydantic configuration for every spec: unknown keys are errors, docs on every field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError


class Spec(BaseModel):
    """Base class of every manifest section: strict about unknown keys, validated on assignment."""

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        populate_by_name=True,
        use_attribute_docstrings=True,
        protected_namespaces=(),
    )


def field_error(field: str, message: str) -> PydanticCustomError:
    """An error for a cross-field check, located at `field` (the error formatter appends it).

    Raise it from a model validator; pydantic reports the model's location, and
    `agile_core.errors` adds `field` so users see the exact key. Avoid braces in `message`.
    """
    return PydanticCustomError("field_error", message, {"field": field})
