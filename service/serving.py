"""The API server processes of `assaygate serve`: one in-process server, or N processes.

With `--processes N` (`ASSAYGATE_API_PROCESSES`) above 1, `serve` supervises N children, each
running uvicorn on a listening socket of its own bound with `SO_REUSEPORT` to the same address,
so the kernel spreads new connections across them and no process accepts for another. A child
that dies is started again (with back-off); SIGTERM or SIGINT stops every child, then the worker.

Why not `uvicorn --workers`: its children share one socket that uvicorn creates with protocol 0,
so the accepted connections have protocol 0 too and asyncio's transport (which sets TCP_NODELAY
only on IPPROTO_TCP sockets) leaves Nagle on: a small reply waits for the client's delayed ACK.
Our sockets are created with IPPROTO_TCP; docs/operations.md has the measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from service.settings import Settings, configure_logging, get_settings

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger("assaygate.serve")

#: The response header naming which API process (1..N) answered: for operators and tests.
PROCESS_HEADER = "assaygate-process"
READY = b"r"


class Stoppable(Protocol):
    def stop(self) -> None: ...


def listening_socket(
    host: str, port: int, reuse_port: bool, *, listen: bool = True
) -> socket.socket:
    """A TCP socket bound to (host, port), listening unless `listen` is False (the server
    listens on it when it starts serving). IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on an
    accepted connection only when its protocol says TCP."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
        if listen:
            sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def _uvicorn_config(settings: Settings, index: int) -> uvicorn.Config:
    import uvicorn

    from service.asgi import create_app

    # loop "auto": uvloop when installed. http: httptools (a dependency) with a cap on each
    # request's head, counted before the parser buffers it (service/http/head.py).
    from service.http.head import with_head_timeout

    return uvicorn.Config(
        create_app(settings),
        log_config=None,
        access_log=False,
        headers=[(PROCESS_HEADER, str(index))],
        http=with_head_timeout(settings.head_timeout_s),
    )


def _server(config: uvicorn.Config, on_started: Callable[[], None]) -> uvicorn.Server:
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            # Listening now; no request is served before `on_started` returns.
            if self.started:
                # What start-up built lives as long as the process: frozen, the collector's
                # passes walk only what requests allocate (gate reads at 16 clients: p99 14-18
                # ms with it, 21-29 ms without; docs/operations.md).
                gc.collect()
                gc.freeze()
                on_started()

    return Server(config)


def run(settings: Settings, processes: int, announcement: str, worker: Stoppable | None) -> int:
    """Serve until SIGTERM or SIGINT, then stop `worker`. Prints `announcement` once listening."""
    try:
        if processes <= 1:
            return _run_in_process(settings, announcement)
        return Supervisor(settings, processes).run(announcement)
    finally:
        if worker is not None:
            worker.stop()


def _run_in_process(settings: Settings, announcement: str) -> int:
    config = _uvicorn_config(settings, 1)
    config.host, config.port = settings.host, settings.port
    _server(config, lambda: print(announcement, flush=True)).run()
    return 0


class Supervisor:
    """N API children on one port, each with its own SO_REUSEPORT socket."""

    def __init__(self, settings: Settings, processes: int, ready_within: float = 60.0) -> None:
        self.settings = settings
        self.processes = processes
        self.ready_within = ready_within
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._backoff: dict[int, float] = {}
        self._next_start: dict[int, float] = {}
        self._stopping = threading.Event()
        self._holder: socket.socket | None = None

    def run(self, announcement: str) -> int:
        self._reserve_port()
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            # One at a time: the first start creates the signing and session keys, and two
            # processes creating them at once would each keep a different key.
            for index in range(1, self.processes + 1):
                started = self._start(index)
                if self._stopping.is_set():
                    return 0
                if not started:
                    log.error("API process %d did not start; stopping", index)
                    return 1
            print(announcement, flush=True)
            while not self._stopping.wait(0.2):
                self._restart_dead()
            return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._stop_children()
            if self._holder is not None:
                self._holder.close()

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self._stopping.set()

    def _reserve_port(self) -> None:
        """Fail fast on a port in use, and fix port 0 to one number for every child.

        A plain bind first: SO_REUSEPORT would silently join a group left by an earlier `serve`
        of the same user. The holder (bound, never listening, so never handed a connection)
        keeps the port number the children share for as long as `serve` runs."""
        host, port = self.settings.host, self.settings.port
        if port:
            listening_socket(host, port, reuse_port=False).close()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        holder = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((host, port))
        self._holder = holder
        self.port = holder.getsockname()[1]

    def _start(self, index: int) -> bool:
        """Start child `index` and wait until it listens; False if it died or took too long."""
        read_fd, write_fd = os.pipe()
        env = self.settings.child_environment()
        env["ASSAYGATE_PORT"] = str(self.port)
        command = [sys.executable, "-m", "service.serving", str(index), str(write_fd)]
        try:
            child = subprocess.Popen(
                command, env=env, pass_fds=(write_fd,), preexec_fn=_die_with_parent
            )
        finally:
            os.close(write_fd)
        self._children[index] = child
        log.info("API process %d started", index, extra={"worker": str(child.pid)})
        try:
            return _wait_ready(read_fd, child, self.ready_within, self._stopping)
        finally:
            os.close(read_fd)

    def _restart_dead(self) -> None:
        now = time.monotonic()
        for index, child in list(self._children.items()):
            if child.poll() is None or now < self._next_start.get(index, 0.0):
                continue
            if self._stopping.is_set():
                return
            # A process that cannot start would otherwise be restarted in a tight loop.
            backoff = self._backoff.get(index, 0.5)
            self._backoff[index] = min(backoff * 2, 30.0)
            self._next_start[index] = now + backoff
            log.error("API process %d exited with %s; restarting", index, child.returncode)
            if self._start(index):
                self._backoff[index] = 0.5

    def _stop_children(self) -> None:
        children = [c for c in self._children.values() if c.poll() is None]
        for child in children:
            child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _wait_ready(
    fd: int, child: subprocess.Popen[bytes], within: float, stopping: threading.Event
) -> bool:
    import select

    deadline = time.monotonic() + within
    while time.monotonic() < deadline and not stopping.is_set():
        readable, _, _ = select.select([fd], [], [], 0.1)
        if readable:
            return os.read(fd, 1) == READY
        if child.poll() is not None:
            return False
    return False


def _die_with_parent() -> None:
    """Linux: a child gets SIGTERM if `serve` dies without cleaning up (SIGKILL, OOM)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _child(index: int, ready_fd: int) -> int:
    """One API process: its own SO_REUSEPORT socket on the shared port."""
    settings = get_settings()
    configure_logging(settings)
    config = _uvicorn_config(settings, index)
    # Bound, not listening: a listening socket joins the port's group and the kernel hands it
    # its share of new connections at once, which would wait out this process's imports and
    # start-up (seconds on a busy machine, after a restart too). The server listens on it once
    # its app has started.
    sock = listening_socket(settings.host, settings.port, reuse_port=True, listen=False)

    def started() -> None:
        with contextlib.suppress(OSError):
            os.write(ready_fd, READY)
            os.close(ready_fd)

    _server(config, started).run(sockets=[sock])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one API process of `assaygate serve`")
    parser.add_argument("index", type=int)
    parser.add_argument("ready_fd", type=int)
    args = parser.parse_args(argv)
    return _child(args.index, args.ready_fd)


if __name__ == "__main__":
    sys.exit(main())
