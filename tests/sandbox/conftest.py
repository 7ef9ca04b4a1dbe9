"""Tenant code in the sandbox: a code dir with an attack script, the worker's secrets beside it, a
stand-in API and MCP proxy on loopback, and the real PostgreSQL and Redis of this machine."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from service.sandbox import Confinement, ProcessLimits

HERE = Path(__file__).resolve().parent
# The tenant's program: one attack per run, named on its command line. It prints what it got
# ({"leaked": ...}, exit 0) or why it could not ({"blocked": "Error: ..."}, exit 3).
ATTACK = (HERE / "tenant_attack.py").read_text()


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from " + self.server.server_name.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(name: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    server.server_name = name
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def api_port() -> Iterator[int]:
    """A real HTTP server on loopback standing for the gate's API."""
    server = serve("the gate's API")
    yield int(server.server_address[1])
    server.shutdown()


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    """A real HTTP server on loopback standing for the trial's MCP proxy (the one address a
    command runner's sandbox is given)."""
    server = serve("the trial's proxy")
    yield f"http://127.0.0.1:{server.server_address[1]}/t/token/mcp"
    server.shutdown()


@dataclass(frozen=True)
class Worker:
    """What a worker has that the tenant's code must never reach."""

    keys: Path
    data: Path
    code: Path


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Worker:
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    key = keys / "signing.key"
    key.write_text("-----BEGIN PRIVATE KEY----- the gate's signing key")
    key.chmod(0o600)
    data = tmp_path / "data"
    data.mkdir()
    (data / "assaygate.db").write_text("the gate's data")
    code = tmp_path / "code"
    code.mkdir()
    (code / "attack.py").write_text(ATTACK)
    # Readable by the sandbox user: the tenant's code is theirs to read.
    code.chmod(0o755)
    (code / "attack.py").chmod(0o644)
    monkeypatch.setenv("ASSAYGATE_DATABASE_URL", "postgresql://gate:hunter2@127.0.0.1:5432/gate")
    monkeypatch.setenv("ASSAYGATE_REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "worker-secret")
    return Worker(keys=keys, data=data, code=code)


def confinement(code: Path, **limits: int) -> Confinement:
    return Confinement(
        code_dir=code, env={"TENANT_SECRET": "tenant-secret"}, limits=ProcessLimits(**limits)
    )


def host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds `marker` (every process, every namespace)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


def outlived(marker: str, grace_s: float = 5.0) -> list[int]:
    """Host pids still holding `marker` once the kernel had `grace_s` to tear a namespace down."""
    end = time.monotonic() + grace_s
    while host_processes_with(marker) and time.monotonic() < end:
        time.sleep(0.05)
    return host_processes_with(marker)
