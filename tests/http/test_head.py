"""The request head's protocol on a real uvicorn server: a client that trickles its headers is
answered 408 and closed; a refused request pipelined behind a valid one never overtakes it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from service.http.head import with_head_timeout

TIMEOUT_S = 1.0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await asyncio.sleep(0.3)  # long enough for a pipelined refusal to try to overtake it
    body = f"answered {scope['path']}".encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, log_level="warning", http=with_head_timeout(TIMEOUT_S), lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield int(sock.getsockname()[1])
    server.should_exit = True
    thread.join(10)


def read_all(sock: socket.socket) -> bytes:
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def test_a_client_that_trickles_its_headers_is_answered_408_and_closed(port: int) -> None:
    # The head's deadline is for the whole head: the server closes on a client still sending a
    # header every 0.25 s (a deadline per read would never fire while it trickles). Shown by the
    # close cutting the trickle short, not by a stopwatch: the trickle's length is only a guard.
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        cut = False
        try:
            for _ in range(int(60 / 0.25)):
                sock.sendall(b"X-Slow: a\r\n")
                time.sleep(0.25)
        except OSError:
            cut = True  # closed on us: that is the point
        answer = read_all(sock)
    assert cut, "the server let a client trickle its head for a minute"
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_a_connection_that_never_sends_a_byte_is_closed(port: int) -> None:
    # Closed by the server (408, then end of stream) well before the client's own 30 s timeout,
    # which only turns a server that never closes into a failure.
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        assert read_all(sock).startswith(b"HTTP/1.1 408")


@pytest.mark.parametrize(
    "oversize",
    [
        b"X-Pad: " + b"a" * 20_000 + b"\r\n",
        b"".join(b"X-H%d: v\r\n" % i for i in range(150)),
    ],
    ids=["bytes", "fields"],
)
def test_a_valid_request_pipelined_before_an_oversize_one_gets_its_own_answer_first(
    port: int, oversize: bytes
) -> None:
    first = b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n"
    second = b"GET /second HTTP/1.1\r\nHost: x\r\n" + oversize + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(first + second)
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert b"answered /first" in answer
    refusal = answer.index(b"HTTP/1.1 431")
    assert refusal > answer.index(b"answered /first")
    assert b"answered /second" not in answer


def test_an_ordinary_keep_alive_connection_is_served_request_after_request(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for path in (b"/a", b"/b"):
            sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while b"answered " + path not in got:
                got += sock.recv(65536)
            assert got.startswith(b"HTTP/1.1 200")
