"""A total deadline on one outbound exchange: connect, send and the whole reply.

A socket timeout bounds each read, not the exchange: a peer that sends one byte just inside it
holds the caller for as long as it likes. `Deadline` is the wall-clock bound around the whole
exchange: the caller connects with `remaining()` as its timeout and hands the connected socket to
`watch`; when the deadline passes, one watchdog thread (shared by every deadline of the process)
shuts the connection down, so whatever read or write is blocked on it returns at once and the
exchange fails. `exchange` does this for one request of an `http.client` connection and says
`DeadlinePassed` when the deadline, not the peer, ended it.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any


class DeadlinePassed(TimeoutError):
    """The exchange did not end within its total deadline."""


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
