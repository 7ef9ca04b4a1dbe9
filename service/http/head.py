"""The request head's limits, enforced in the HTTP parser's protocol before any work.

uvicorn's httptools protocol buffers a request line and headers of any size (llhttp has no cap,
and uvicorn's `h11_max_incomplete_event_size` applies to h11 only): 64 MB of headers were read
into memory and answered 200 without a key. An ASGI middleware runs only once the head is parsed,
too late. `LimitedHttpToolsProtocol` counts the head's bytes as they arrive, before the parser
sees them, and answers with a JSON error and closes the connection:
- `431` when the head is over `MAX_HEAD_BYTES` or holds more than `MAX_HEADERS` headers;
- `414` when the request line is over `MAX_URL_BYTES` (and its method and version).
The data of one read beyond the cap is the most a connection holds (asyncio reads 256 KiB).
A head must also arrive within `head_timeout_s` of its first byte (or of the connection): a
client that trickles its headers (slowloris) gets `408` and is closed. A refusal never overtakes
an earlier pipelined request: that one is answered first, then the refusal, then the close.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 100
MAX_URL_BYTES = 8 * 1024
_METHOD_AND_VERSION = 32

_REASONS = {408: b"Request Timeout", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


class _HeadTooLarge(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def _answer(status: int) -> bytes:
    if status == 408:
        code, message, field = (
            "head_timeout",
            "the request headers did not arrive in time",
            "headers",
        )
    elif status == 414:
        code, message, field = (
            "request_line_too_long",
            f"the request line is over {MAX_URL_BYTES} bytes",
            "url",
        )
    else:
        code, message, field = (
            "headers_too_large",
            f"the request headers are over {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} fields",
            "headers",
        )
    body = json.dumps({"error": {"code": code, "message": message, "field": field}}).encode()
    return b"".join(
        [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a cap on each request's head (see the module)."""

    #: Seconds a request head may take from its first byte (`with_head_timeout` sets it).
    head_timeout_s = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused: int | None = None
        self._deferred = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        """Before a request's first byte (the parser's own callbacks come after we count)."""
        self._in_head = True
        self._head_bytes = 0
        self._line_seen = False
        self._line_bytes = 0
        self._header_count = 0
        # What the parser handed over of this head: counts a head pipelined behind another in
        # the same read, which the count above (one head per read) does not see.
        self._parsed_bytes = 0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm_head_timer()  # a connection that never sends a byte is a slow head too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_too_slow)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._in_head and self._refused is None and not self.transport.is_closing():
            self._refuse(408)

    def _busy(self) -> bool:
        """An earlier request of this connection is still being answered (or queued)."""
        cycle = getattr(self, "cycle", None)
        return (cycle is not None and not cycle.response_complete) or bool(self.pipeline)

    def _refuse(self, status: int) -> None:
        self._refused = status
        self._disarm_head_timer()
        if self._busy():
            # Pipelined after a valid request: that one's answer goes first (on_response_complete).
            self._deferred = True
            return
        self.transport.write(_answer(status))
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._deferred and not self._busy() and not self.transport.is_closing():
            self._deferred = False
            self.transport.write(_answer(self._refused or 400))
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused is not None:
            return
        if self._in_head:
            if self._head_bytes == 0 and self._head_timer is None:
                self._arm_head_timer()
            # A new request's head starts each read that begins while no head is complete.
            end = data.find(b"\r\n\r\n")
            self._head_bytes += len(data) if end < 0 else end + 4
            if not self._line_seen:
                newline = data.find(b"\n")
                self._line_bytes += len(data) if newline < 0 else newline
                self._line_seen = newline >= 0
            if self._line_bytes > MAX_URL_BYTES + _METHOD_AND_VERSION:
                self._refuse(414)
                return
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(431)
                return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        # A callback's _HeadTooLarge reaches uvicorn as a parser error: answer it as what it is.
        if self._refused is not None:
            self._refuse(self._refused)
            return
        super().send_400_response(msg)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_URL_BYTES:
            self._refused = 414
            raise _HeadTooLarge(414)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._parsed_bytes += len(name) + len(value) + 4
        if self._header_count > MAX_HEADERS or self._parsed_bytes > MAX_HEAD_BYTES:
            self._refused = 431
            raise _HeadTooLarge(431)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reset()


def with_head_timeout(seconds: float) -> type[LimitedHttpToolsProtocol]:
    """The protocol class with its head timeout (`ASSAYGATE_HEAD_TIMEOUT_S`)."""
    fields = {"head_timeout_s": seconds}
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), fields)
