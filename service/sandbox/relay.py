"""The gate's side of a sandbox's relays, on one asyncio loop per worker process.

A sandbox has no network of its own: its inner launcher (`inner.py`) turns each allowed TCP port
into a Unix socket in the sandbox's run directory, and this module serves those sockets:
- `outbound`: a Unix socket whose every connection is piped on to one fixed host:port (the
  trial's MCP proxy, the python target's tool server), nothing else;
- `inbound`: an ephemeral 127.0.0.1 port on the gate's side whose every connection is piped into
  the sandbox through the inner launcher's Unix socket (the python hosts the gate POSTs to);
- `egress`: an HTTP forward proxy (CONNECT, and absolute-form plain HTTP) on a Unix socket that
  asks the confinement's egress check for every destination and connects only to the address it
  returns.

One loop thread serves every sandbox of the process (relaying is I/O, not CPU); it also spawns
the sandboxes' processes, because bubblewrap's `--die-with-parent` follows the spawning *thread*
and this thread lives as long as the process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import stat
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from service.core.system.egress import GATE_LOOPBACK_HOST

# The one byte pump both sides of a relay use (the inner launcher is standard library only).
from service.sandbox.inner import pipe

T = TypeVar("T")
HEAD_LIMIT = 16384
CONNECT_TIMEOUT_S = 10.0
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Egress = Callable[[str, int], str]


class _Loop:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="sandbox-relays", daemon=True
        )
        self.thread.start()


_lock = threading.Lock()
_current: _Loop | None = None


def _relay_loop() -> _Loop:
    """The process's relay loop (a forked worker child starts its own: threads do not fork)."""
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = _Loop()
        return _current


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run `coro` on the relay loop and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, _relay_loop().loop).result(timeout)


def call(fn: Callable[[], T], timeout: float = 30.0) -> T:
    """Call `fn` on the relay thread (spawning a sandbox there: see the module's docstring)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def go() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    _relay_loop().loop.call_soon_threadsafe(go)
    return future.result(timeout)


async def _splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, far: Streams) -> None:
    await asyncio.gather(pipe(reader, far[1]), pipe(far[0], writer))


async def _connect_or_close(
    writer: asyncio.StreamWriter, opening: Awaitable[Streams]
) -> Streams | None:
    try:
        return await asyncio.wait_for(opening, CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError):
        writer.close()
        return None


async def serve_outbound(path: str, host: str, port: int) -> asyncio.Server:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        far = await _connect_or_close(w, asyncio.open_connection(host, port))
        if far is not None:
            await _splice(r, w, far)

    return await asyncio.start_unix_server(handle, path)


async def _open_sandbox_socket(path: str) -> Streams:
    """Connect to the Unix socket the sandbox made, never to what a symlink in its place names:
    the sandbox user owns the run directory and may swap the entry, and this side runs as the
    worker, on the host's file system. (The directories above it are the worker's own.)"""
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ConnectionRefusedError(f"{path} is not a socket")
        return await asyncio.open_unix_connection(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


async def serve_inbound(path: str) -> tuple[asyncio.Server, int]:
    """An ephemeral port on the gate's own loopback address (never an egress target) whose
    connections go into the sandbox's Unix socket."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        far = await _connect_or_close(w, _open_sandbox_socket(path))
        if far is not None:
            await _splice(r, w, far)

    server = await asyncio.start_server(handle, GATE_LOOPBACK_HOST, 0)
    return server, int(server.sockets[0].getsockname()[1])


def _split_host_port(text: str, default: int) -> tuple[str, int]:
    if text.startswith("["):  # an IPv6 literal
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default
    host, sep, port = text.rpartition(":")
    return (host, int(port)) if sep else (text, default)


def _target(method: str, target: str) -> tuple[str, int, str]:
    """(host, port, origin-form path) of a proxy request line's target."""
    if method == "CONNECT":
        host, port = _split_host_port(target, 443)
        return host, port, ""
    if not target.startswith("http://"):
        raise ValueError("only CONNECT and absolute http:// requests go through this proxy")
    rest = target[len("http://") :]
    authority, slash, path = rest.partition("/")
    host, port = _split_host_port(authority, 80)
    return host, port, slash + path if slash else "/"


async def serve_egress(path: str, egress: Egress) -> asyncio.Server:
    """The forward proxy: every destination passes `egress(host, port)` at connection time."""

    async def refuse(w: asyncio.StreamWriter, status: str, reason: str) -> None:
        body = reason.encode("utf-8", "replace")[:500]
        w.write(
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(OSError):
            await w.drain()
        w.close()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            head = await r.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            w.close()
            return
        line, _, headers = head.decode("latin-1").partition("\r\n")
        parts = line.split(" ")
        try:
            if len(parts) != 3:
                raise ValueError("not an HTTP request line")
            host, port, origin = _target(parts[0], parts[1])
        except ValueError as exc:
            await refuse(w, "400 Bad Request", str(exc))
            return
        loop = asyncio.get_running_loop()
        try:
            # The check may resolve names: off the relay loop.
            address = await loop.run_in_executor(None, egress, host, port)
        except Exception as exc:
            await refuse(w, "403 Forbidden", f"egress refused: {exc}")
            return
        far = await _connect_or_close(w, asyncio.open_connection(address, port))
        if far is None:
            return
        if parts[0] == "CONNECT":
            w.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            # One request per connection: a second one must pass the check for its own host.
            kept = [h for h in headers.split("\r\n") if h and not _hop(h)]
            far[1].write(
                "\r\n".join([f"{parts[0]} {origin} {parts[2]}", *kept, "Connection: close"]).encode(
                    "latin-1"
                )
                + b"\r\n\r\n"
            )
        await _splice(r, w, far)

    return await asyncio.start_unix_server(handle, path, limit=HEAD_LIMIT)


def _hop(header: str) -> bool:
    name = header.partition(":")[0].strip().lower()
    return name in ("connection", "proxy-connection", "proxy-authorization", "keep-alive")
