"""ASGI middleware: the request body limit and one structured log line per request."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.http.errors import ErrorDetail, ErrorResponse

log = logging.getLogger("assaygate.http")


#: Bodies that are bytes, not text: a streamed route's body passes unbuffered only with one of
#: these types (a JSON or form body would be read whole by the request-text check).
STREAMED_TYPES = frozenset({"application/gzip", "application/octet-stream"})


class BodyLimit:
    """Refuse bodies over `max_bytes` with 413 before any route sees them.

    The body is read up front (it is small by construction) so a chunked upload without a
    Content-Length is held to the same limit as one that declares its size. `streamed` names
    the (method, path)s whose bytes body the route streams itself under a cap of its own (an
    artifact upload): a declared length over that cap is refused here, anything else passes
    unbuffered and the route counts as it reads.
    """

    def __init__(
        self, app: ASGIApp, max_bytes: int, streamed: dict[tuple[str, str], int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.streamed = dict(streamed or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        cap = self.streamed.get((scope["method"], scope["path"]))
        kind = headers.get(b"content-type", b"").split(b";", 1)[0].strip().decode("latin-1")
        if cap is not None and kind.lower() in STREAMED_TYPES:
            if declared is not None and declared.isdigit() and int(declared) > cap:
                await self._refuse(send, cap)
                return
            await self.app(scope, receive, send)
            return
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, cap: int | None = None) -> None:
        payload = ErrorResponse(
            error=ErrorDetail(
                code="body_too_large",
                message=f"request body exceeds {cap or self.max_bytes} bytes",
                field="body",
            )
        ).model_dump()
        data = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})


class RequestLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            extra: dict[str, Any] = {
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 2),
            }
            log.info("request", extra=extra)
