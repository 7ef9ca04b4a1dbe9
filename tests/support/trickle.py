"""A peer that reads each request whole, then answers one byte every `every_s`: inside any per-read
timeout longer than that, and done only after more than a minute. What a total deadline is for."""

from __future__ import annotations

import socket
import threading

REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


class Trickle:
    """Serves from threads of its own until `close()` (or the end of its `with` block); the
    request path is the caller's to choose, `url` names `/hook`."""

    def __init__(self, every_s: float = 2.0) -> None:
        self.every_s = every_s
        self.connected = threading.Event()
        self.stopped = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def port(self) -> int:
        port: int = self._server.getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.stopped.set()
        self._server.close()

    def __enter__(self) -> Trickle:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(body) < length:
                    body += conn.recv(4096)
                self.connected.set()
                for byte in REPLY:
                    if self.stopped.wait(self.every_s):
                        return
                    conn.sendall(bytes([byte]))
            except (OSError, StopIteration):
                return  # the gate hung up: what a deadline does
