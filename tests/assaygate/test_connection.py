"""The python host's link reads one HTTP head the same way at both ends: the tool server's replies
(`assaygate._connection`) and the requests `assaygate.host` serves, bounded either way."""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Iterator

import pytest

from assaygate import host
from assaygate._connection import MAX_HEADER_LINES, read_head


def _head(*lines: str) -> io.BytesIO:
    return io.BytesIO("".join(f"{line}\r\n" for line in (*lines, "")).encode() + b"body")


def test_a_head_gives_its_content_length_and_whether_the_peer_closes() -> None:
    assert read_head(_head("Content-Length: 4", "Connection: close")) == (4, True)
    assert read_head(_head("content-length: 12", "Connection: keep-alive")) == (12, False)


def test_a_head_without_a_length_has_an_empty_body() -> None:
    assert read_head(_head("Content-Type: application/json")) == (0, False)


def test_a_head_stops_at_the_blank_line_and_leaves_the_body_unread() -> None:
    stream = _head("Content-Length: 4")
    read_head(stream)
    assert stream.read() == b"body"


def test_a_length_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(ValueError):
        read_head(_head("Content-Length: four"))


def test_a_head_of_endless_header_lines_is_refused_after_the_bound() -> None:
    flood = _head(*(f"X-Pad-{i}: x" for i in range(MAX_HEADER_LINES + 1)))
    with pytest.raises(ValueError, match="header lines"):
        read_head(flood)
    assert read_head(_head(*(f"X-Pad-{i}: x" for i in range(MAX_HEADER_LINES - 1)))) == (0, False)


@pytest.fixture
def served() -> Iterator[tuple[str, int]]:
    server = host._Server(("127.0.0.1", 0), host._Handler)
    server.fn = lambda task, tools: None
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[0], server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _exchange(address: tuple[str, int], request: bytes) -> bytes:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_host_answers_a_request_whose_head_is_within_the_bound(
    served: tuple[str, int],
) -> None:
    reply = _exchange(served, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200")


def test_the_host_closes_a_request_that_floods_its_head_without_answering(
    served: tuple[str, int],
) -> None:
    pad = b"".join(b"X-Pad-%d: x\r\n" % i for i in range(MAX_HEADER_LINES + 1))
    assert _exchange(served, b"GET /healthz HTTP/1.1\r\n" + pad + b"\r\n") == b""


def test_the_host_closes_a_request_whose_length_is_not_a_number(served: tuple[str, int]) -> None:
    reply = _exchange(served, b"POST / HTTP/1.1\r\nContent-Length: many\r\n\r\n")
    assert reply == b""
