"""API errors: `{"error": KIND, "message": str, "errors": [...]}` with the contract's status codes."""

from __future__ import annotations

from typing import Any

STATUS = {"unauthorized": 401, "not_found": 404, "validation": 422, "too_large": 413, "conflict": 409,
          "bad_request": 400, "server": 500}


class ApiError(Exception):
    """Raised by handlers; rendered as the JSON error body with the status of its kind."""

    def __init__(self, kind: str, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = STATUS[kind]
        self.message = message
        self.errors = errors or []

    def body(self) -> dict[str, Any]:
        """The response JSON."""
        return {"error": self.kind, "message": self.message, "errors": self.errors}
