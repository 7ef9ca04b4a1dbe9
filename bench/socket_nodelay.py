"""Why `serve --processes` creates its sockets with IPPROTO_TCP: small replies with and without.

    .venv/bin/python bench/socket_nodelay.py [--requests 200]

Serves a two-part ASGI reply (headers, then a small body: what every JSON route sends) from uvicorn
on a socket created with protocol 0 (what `uvicorn --workers` shares between its children) and
with IPPROTO_TCP, under asyncio and uvloop and both HTTP parsers, and times sequential keep-alive
requests. asyncio sets TCP_NODELAY on an accepted connection only when the socket's protocol is
IPPROTO_TCP; without it Nagle holds the body until the client's delayed ACK. Prints p50 and p99;
asserts nothing.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import socket
import time
from typing import Any


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b'{"ok":true}'})


def serve(sock: socket.socket, loop: str, parser: str) -> None:
    import uvicorn

    config = uvicorn.Config(app, loop=loop, http=parser, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


def measure(proto: int, loop: str, parser: str, requests: int) -> tuple[float, float]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    server = multiprocessing.get_context("fork").Process(target=serve, args=(sock, loop, parser))
    server.start()
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/")
                conn.getresponse().read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        samples = []
        for _ in range(requests):
            started = time.perf_counter()
            conn.request("GET", "/")
            conn.getresponse().read()
            samples.append(time.perf_counter() - started)
        conn.close()
    finally:
        server.terminate()
        server.join()
        sock.close()
    samples.sort()
    return samples[len(samples) // 2] * 1000, samples[int(len(samples) * 0.99) - 1] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    print(f"{'loop':<8} {'parser':<10} {'socket protocol':<16} {'p50 ms':>8} {'p99 ms':>8}")
    for loop in ("asyncio", "uvloop"):
        for parser in ("h11", "httptools"):
            for proto, name in ((0, "0"), (socket.IPPROTO_TCP, "IPPROTO_TCP")):
                p50, p99 = measure(proto, loop, parser, args.requests)
                print(f"{loop:<8} {parser:<10} {name:<16} {p50:>8.2f} {p99:>8.2f}")


if __name__ == "__main__":
    main()
