"""A python target whose author wants out of its sandbox: with `MODE` (a declared variable) it

probe    tries to read the gate's signing keys, data and secrets key (`GATE_PATHS`), its own
         environment's ASSAYGATE_* variables (the database URL), the PostgreSQL socket, and
         to connect to PostgreSQL, Redis and the API (`GATE_PORTS`); then raises, naming
         every one it reached ("reached nothing" when the sandbox held)
memory   allocates until it is stopped, then raises naming how it was stopped
hang     never answers (its deadline ends it)
"""

from __future__ import annotations

import os
import socket
import time

from service.core.trial.sandbox import Task, Tools

PG_SOCKET = "/var/run/postgresql/.s.PGSQL.5432"
OWN = frozenset({"ASSAYGATE_LISTEN_PORT"})  # the sandbox's own: where the host listens


def _probe() -> list[str]:
    reached: list[str] = []
    for path in filter(None, os.environ.get("GATE_PATHS", "").split(os.pathsep)):
        try:
            with open(path, "rb") as f:
                f.read(64)
            reached.append(f"read {path}")
        except OSError:
            pass
    reached += [f"env {k}" for k in os.environ if k.startswith("ASSAYGATE_") and k not in OWN]
    for hostport in filter(None, os.environ.get("GATE_PORTS", "").split(",")):
        host, port = hostport.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), 1).close()
            reached.append(f"connected {hostport}")
        except OSError:
            pass
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(1)
        s.connect(PG_SOCKET)
        reached.append(f"connected {PG_SOCKET}")
    except OSError:
        pass
    return reached


def agent(task: Task, tools: Tools) -> None:
    mode = os.environ.get("MODE", "probe")
    if mode == "probe":
        reached = _probe()
        raise RuntimeError(f"escape reached {', '.join(reached) if reached else 'nothing'}")
    if mode == "memory":
        blocks = []
        try:
            while True:
                blocks.append(bytearray(64 * 2**20))
        except MemoryError:
            held = len(blocks) * 64
            blocks.clear()
            raise RuntimeError(f"escape stopped by MemoryError after {held} MB") from None
    time.sleep(3600)
