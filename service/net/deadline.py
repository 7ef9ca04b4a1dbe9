"""A total deadline on one outbound exchange: connect, send and the whole reply.

A socket timeout bounds each read, not the exchange: a peer that sends one byte just inside it
holds the caller for as long as it likes. `Deadline` is the wall-clock bound around the whole
exchange: the caller connects with `remaining()` as its timeout and hands the connected socket to
`watch`; when the deadline passes, one watchdog thread (shared by every deadline of the process)
shuts the connection down, so whatever read or write is blocked on it returns at once and the
exchange fails. `exchange` does this for one request of an `http.client` connection and says
`DeadlinePassed` when the deadline, not the peer, ended it.

An httpx client gets the same bound without a watchdog: its transport's connections come from a
`BoundedBackend`, and every connect, TLS handshake, read and write they make inside
`total(seconds)` waits at most for what is left of those seconds, then fails as httpx's own
timeout.

A call on an event loop (the MCP SDK's sessions) is bounded by `within`: past its seconds it is
cancelled, whatever its reads are still waiting for.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import http.client
import itertools
import os
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import httpcore

T = TypeVar("T")


class DeadlinePassed(TimeoutError):
    """The exchange did not end within its total deadline."""


async def within(seconds: float, call: Awaitable[T], what: str) -> T:
    """`await call`, cancelled once `seconds` have passed in all; `DeadlinePassed` then says
    "`what` within `seconds` s" (a timeout the call raised itself before then is its own)."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + seconds
    try:
        return await asyncio.wait_for(call, seconds)
    except TimeoutError:
        if loop.time() < ends:
            raise
        raise DeadlinePassed(f"{what} within {seconds:g} s") from None


class Deadline:
    """`with Deadline(seconds) as deadline:` arms it; leaving the block disarms it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.passed = False
        # A duplicate of each watched socket's descriptor, ours to shut and close: shutdown
        # acts on the connection every descriptor shares, so it ends the caller's reads whether
        # its socket was since wrapped in TLS (which takes the descriptor over) or not, and a
        # descriptor the caller closed and the process reused is never ours to touch.
        self._twins: list[socket.socket] = []
        self._lock = threading.Lock()
        self._armed = False

    def remaining(self) -> float:
        """Seconds left, never below a millisecond (a zero timeout would mean non-blocking)."""
        return max(self.ends - time.monotonic(), 0.001)

    def watch(self, sock: socket.socket | None) -> None:
        """Shut `sock`'s connection down when the deadline passes (at once if it has)."""
        if sock is None or sock.fileno() < 0:
            return
        twin = socket.socket(fileno=os.dup(sock.fileno()))
        with self._lock:
            if self._armed and not self.passed:
                self._twins.append(twin)
                return
        _shut(twin)

    def __enter__(self) -> Deadline:
        self._armed = True
        _WATCHDOG.arm(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._armed = False
            twins, self._twins = self._twins, []
        for twin in twins:
            twin.close()

    def _expire(self) -> None:
        with self._lock:
            if not self._armed:
                return
            self.passed = True
            twins, self._twins = self._twins, []
        for twin in twins:
            _shut(twin)


def _shut(twin: socket.socket) -> None:
    try:
        twin.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected (any more): nothing left to end
    finally:
        twin.close()


def exchange(
    conn: http.client.HTTPConnection,
    deadline: Deadline,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    limit: int | None = None,
) -> tuple[http.client.HTTPResponse, bytes]:
    """One request on `conn` and its reply (at most `limit` bytes of it read), its connection
    (new or kept alive) watched by `deadline`. Raises `DeadlinePassed` when the deadline ended
    it, whatever error the cut surfaced as."""
    try:
        if conn.sock is None:
            conn.timeout = deadline.remaining()
            # http.client's seam for opening the socket (not in its stubs).
            connect: Any = getattr(conn, "_create_connection")  # noqa: B009

            def watched(address: tuple[str, int], timeout: float, source: object = None) -> Any:
                sock = connect(address, timeout, source)
                deadline.watch(sock)  # before any TLS handshake: it is part of the exchange
                return sock

            setattr(conn, "_create_connection", watched)  # noqa: B010
            try:
                conn.connect()
            finally:
                setattr(conn, "_create_connection", connect)  # noqa: B010
        else:
            deadline.watch(conn.sock)
        conn.request(method, path, body, headers)
        reply = conn.getresponse()
        data = reply.read() if limit is None else reply.read(limit)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if deadline.passed:
            raise DeadlinePassed(f"no whole reply within {deadline.seconds:g} s") from exc
        raise
    if deadline.passed:
        # A reply read to the connection's end: the cut may have made that end.
        raise DeadlinePassed(f"no whole reply within {deadline.seconds:g} s")
    return reply, data


class _Watchdog:
    """One daemon thread that expires deadlines in order of their end."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # Also in a forked child, which inherits neither the thread nor a usable lock.
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, deadline: Deadline) -> None:
        with self._wake:
            heapq.heappush(self._heap, (deadline.ends, next(self._order), deadline))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="outbound-deadlines", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap:
                    self._wake.wait()
                ends, _, deadline = self._heap[0]
                wait = ends - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._heap)
            deadline._expire()


_WATCHDOG = _Watchdog()
os.register_at_fork(after_in_child=_WATCHDOG._reset)


# -- httpx -----------------------------------------------------------------------------------

_bound = threading.local()


@contextlib.contextmanager
def total(seconds: float) -> Iterator[None]:
    """Bound every connect, read and write a `BoundedBackend` makes in this thread, inside the
    block, to `seconds` from now in all."""
    _bound.ends = time.monotonic() + seconds
    try:
        yield
    finally:
        _bound.ends = None


def _left(timeout: float | None) -> float | None:
    ends: float | None = getattr(_bound, "ends", None)
    if ends is None:
        return timeout
    left = ends - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("past the call's total deadline")
    return left if timeout is None else min(timeout, left)


class BoundedBackend(httpcore.NetworkBackend):
    """httpcore's network backend with `total`'s bound on each operation of its streams."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self.inner = inner if inner is not None else httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self.inner.connect_tcp(host, port, _left(timeout), local_address, socket_options)
        return _BoundedStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _BoundedStream(self.inner.connect_unix_socket(path, _left(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _BoundedStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _left(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # The ssl module bounds a whole handshake by the socket's timeout (one deadline for all
        # its reads), so what is left of the call bounds it too.
        return _BoundedStream(self.inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)
