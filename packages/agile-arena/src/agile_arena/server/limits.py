"""Request size limit (413) as a plain ASGI middleware: a declared Content-Length over the limit is
refused before anything is read; a body that grows past it while read (chunked) is refused too."""

from __future__ import annotations

import json
from typing import Any

from agile_arena.server.errors import ApiError

Scope = dict[str, Any]
DEFAULT_MAX_REQUEST_BYTES = 1_048_576
DEFAULT_MAX_UPLOAD_BYTES = 2 * 1024**3
"""Largest submission that carries files (a model of about a billion 16-bit parameters)."""
DRAIN_LIMIT = 64 * 1024 * 1024
UPLOAD_PATH = "/v1/experiments"
UPLOAD_TYPE = b"application/x-tar"


class BodyLimit:
    """Refuse request bodies larger than `limit` bytes with the API's `too_large` error; a
    submission that carries files (an `application/x-tar` POST to /v1/experiments) may be up to
    `upload_limit` bytes."""

    def __init__(self, app: Any, limit: int, upload_limit: int | None = None) -> None:
        self.app = app
        self.limit = limit
        self.upload_limit = limit if upload_limit is None else upload_limit

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        upload = (scope.get("method") == "POST" and scope.get("path") == UPLOAD_PATH
                  and headers.get(b"content-type", b"").split(b";")[0].strip().lower() == UPLOAD_TYPE)
        limit = self.upload_limit if upload else self.limit
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > limit
            except ValueError:
                too_large = False
            if too_large:
                await self._drain(receive, int(declared))
                await self._refuse(send, limit, upload)
                return
        received = 0

        async def limited_receive() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise ApiError("too_large", self._message(limit, upload))
            return message

        await self.app(scope, limited_receive, send)

    @staticmethod
    def _message(limit: int, upload: bool) -> str:
        if upload:
            return (f"the upload (the manifest and the files it names) is larger than the server's limit of "
                    f"{limit} bytes")
        return f"the request body is larger than the server's limit of {limit} bytes"

    @staticmethod
    async def _drain(receive: Any, declared: int) -> None:
        """Read and drop a refused body of moderate size, so the client, still sending, gets to read
        the 413 instead of a reset connection (larger bodies: the connection is just closed)."""
        if declared > DRAIN_LIMIT:
            return
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return

    async def _refuse(self, send: Any, limit: int, upload: bool) -> None:
        body = json.dumps(ApiError("too_large", self._message(limit, upload)).body()).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
