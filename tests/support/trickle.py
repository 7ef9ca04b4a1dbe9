"""A peer that reads each request whole, then answers one byte every `every_s`: inside any per-read
timeout longer than that, and done only after more than a minute. What a total deadline is for.
`TricklingListing` does so for one method of a real MCP server: its tool listing."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
#: A TLS server's first record, a handshake message of 64 bytes: the client's handshake waits
#: for every byte of it (and fails on what they say, once they have all come).
HANDSHAKE = b"\x16\x03\x03\x00\x40" + bytes(64)


class Trickle:
    """Serves from threads of its own until `close()` (or the end of its `with` block); the
    request path is the caller's to choose, `url` names `/hook`. `tls`: a TLS server's handshake
    is what trickles, once the client's hello has come (`url` is then https)."""

    def __init__(self, every_s: float = 2.0, *, tls: bool = False) -> None:
        self.every_s = every_s
        self.tls = tls
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
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/hook"

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
                if self.tls:
                    conn.recv(4096)  # the client's hello
                    return self._send(conn, HANDSHAKE)
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
                self._send(conn, REPLY)
            except (OSError, StopIteration):
                return  # the gate hung up: what a deadline does

    def _send(self, conn: socket.socket, reply: bytes) -> None:
        self.connected.set()
        for byte in reply:
            if self.stopped.wait(self.every_s):
                return
            conn.sendall(bytes([byte]))


class TricklingListing:
    """A real MCP server over Streamable HTTP (the SDK's own, one tool) whose every reply is
    prompt but the one to `tools/list`: that one is sent one byte every `every_s`. Served by
    uvicorn from a thread until the end of its `with` block; `url` is its MCP endpoint."""

    def __init__(self, every_s: float = 0.5) -> None:
        import mcp_types as types
        import uvicorn
        from mcp.server.lowlevel import Server

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            tool = types.Tool(name="lookup", input_schema={"type": "object"})
            return types.ListToolsResult(tools=[tool])

        self.every_s = every_s
        self.listing = threading.Event()  # a listing's reply has started to trickle
        self.stopped = threading.Event()
        app = Server("trickling-listing", on_list_tools=list_tools).streamable_http_app(
            stateless_http=True, json_response=True
        )
        sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        config = uvicorn.Config(self._trickling(app), log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )

    def _trickling(self, app: Any) -> Any:
        async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return await app(scope, receive, send)
            # The request whole first, then handed on as it came: which method it calls.
            held, body = [], b""
            while True:
                message = await receive()
                held.append(message)
                body += message.get("body", b"")
                if message["type"] != "http.request" or not message.get("more_body"):
                    break

            async def replay() -> Any:
                return held.pop(0) if held else await receive()

            async def trickle(message: dict[str, Any]) -> None:
                data = message.get("body", b"")
                if message["type"] != "http.response.body" or not data:
                    return await send(message)
                self.listing.set()
                for i in range(len(data)):
                    await asyncio.sleep(self.every_s)
                    if self.stopped.is_set():
                        return
                    chunk = {
                        "type": "http.response.body",
                        "body": data[i : i + 1],
                        "more_body": True,
                    }
                    await send(chunk)
                await send({"type": "http.response.body", "body": b"", "more_body": False})

            listing = b'"tools/list"' in body
            await app(scope, replay, trickle if listing else send)

        return asgi

    def __enter__(self) -> TricklingListing:
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("the trickling MCP server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopped.set()
        self._server.should_exit = True
        self._thread.join(timeout=15)
