"""Small real HTTP servers on loopback for the egress tests: one that counts what reaches it,
one that redirects every request elsewhere."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Served:
    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.hits: list[str] = []

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@contextmanager
def serving(
    redirect_to: str | None = None, status: int = 302, body: bytes = b"{}"
) -> Iterator[Served]:
    """A server on 127.0.0.1 answering every request: a redirect to `redirect_to`, or `body`."""
    holder: list[Served] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            holder[0].hits.append(f"{self.command} {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if redirect_to is not None:
                self.send_response(status)
                self.send_header("Location", redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = _answer
        do_POST = _answer

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served = Served(server)
    holder.append(served)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
