"""The python host's client to the sandbox's tool server: keep-alive, one `sendall` a request,
the length-delimited reply read directly (the tool server always sends Content-Length)."""

from __future__ import annotations

import socket
import threading
from typing import IO, Protocol

# A head longer than this is not one the tool server or the python host writes: refused, never
# read on without end.
MAX_HEADER_LINES = 100


class _Lines(Protocol):
    def readline(self, size: int, /) -> bytes: ...


def read_head(rfile: _Lines) -> tuple[int, bool]:
    """An HTTP/1.1 message's headers after its first line, for both ends of the python host's
    link (this client's replies, `assaygate.host`'s requests): the Content-Length (0 when
    absent) and whether the peer asked to close. ValueError: a Content-Length that is not a
    number, or more than `MAX_HEADER_LINES` header lines."""
    length, closing = 0, False
    for _ in range(MAX_HEADER_LINES):
        line = rfile.readline(8192)
        if line in (b"\r\n", b"\n", b""):
            return length, closing
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            closing = value.strip().lower() == b"close"
    raise ValueError(f"more than {MAX_HEADER_LINES} header lines")


class Connection:
    """A keep-alive HTTP/1.1 client to the tool server: one request is one `sendall`, and the
    length-delimited reply is read directly (the tool server always sends Content-Length)."""

    __slots__ = ("host", "port", "rfile", "sock")

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.sock: socket.socket | None = None
        self.rfile: IO[bytes] | None = None

    def close(self) -> None:
        if self.sock is not None:
            assert self.rfile is not None
            self.rfile.close()
            self.sock.close()
        self.sock = self.rfile = None

    def post(self, request: bytes) -> tuple[int, bytes]:
        for attempt in (1, 2):
            fresh = self.sock is None
            if self.sock is None:
                sock = socket.create_connection((self.host, self.port), timeout=60)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.sock, self.rfile = sock, sock.makefile("rb")
            assert self.sock is not None and self.rfile is not None
            try:
                self.sock.sendall(request)
                status_line = self.rfile.readline(8192)
                if not status_line:
                    raise ConnectionResetError("the sandbox closed the connection")
            except (ConnectionResetError, BrokenPipeError):
                self.close()
                # Only an idle connection the server had closed is retried: nothing was read.
                if attempt == 2 or fresh:
                    raise
                continue
            rfile = self.rfile
            length, closing = read_head(rfile)
            data = rfile.read(length) if length else b""
            if closing:
                self.close()
            return int(status_line.split()[1]), data
        raise AssertionError("unreachable")


_local = threading.local()


def connection(host: str, port: int) -> Connection:
    pool: dict[tuple[str, int], Connection] = _local.__dict__.setdefault("pool", {})
    conn = pool.get((host, port))
    if conn is None:
        conn = pool[(host, port)] = Connection(host, port)
    return conn
