"""Shared pydantic configuration for every spec: unknown keys are errors, docs on every field."""

from __future__ import annotations

import types
import typing
import unicodedata
from typing import Annotated, Any, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError


class Spec(BaseModel):
    """Base class of every manifest section: strict about unknown keys, validated on assignment;
    floats must be finite and integers may not be given as booleans."""

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        populate_by_name=True,
        use_attribute_docstrings=True,
        protected_namespaces=(),
        allow_inf_nan=False,
    )

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                info = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and info is not None and _takes_number_not_bool(info.annotation):
                    raise field_error(name, "must be a number, not a boolean")
        return data

    def field_warnings(self) -> list[tuple[tuple[str | int, ...], str, Any]]:
        """Fields of this section that agile accepts but does not act on, as
        ``(path within the section, message, value)``; validation reports each as a warning.
        Nested specs report their own. Subclasses extend it."""
        return []


def _takes_number_not_bool(annotation: Any) -> bool:
    """Whether a field accepts int or float but not bool (so True would silently become 1)."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _takes_number_not_bool(get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return bool(args) and bool not in args and any(_takes_number_not_bool(arg) for arg in args)
    return annotation in (int, float)


def printable(value: str) -> str:
    """`value` when it has no control or format characters (a NUL, a newline, an escape
    sequence): names and paths are printed in logs, progress bars and file names, where those
    would forge or garble output, and a NUL cannot be part of a path."""
    bad = next((char for char in value if unicodedata.category(char).startswith("C")), None)
    if bad is not None:
        raise ValueError(f"must not contain control or format characters (found {bad!r})")
    return value


PrintableStr = Annotated[str, AfterValidator(printable)]
"""A string field checked by :func:`printable`."""


def field_error(field: str, message: str) -> PydanticCustomError:
    """An error for a cross-field check, located at `field` (the error formatter appends it).

    Raise it from a model validator; pydantic reports the model's location, and
    `agile_core.errors` adds `field` so users see the exact key. Avoid braces in `message`.
    """
    return PydanticCustomError("field_error", message, {"field": field})
