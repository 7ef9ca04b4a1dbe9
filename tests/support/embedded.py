"""`assaygate serve` on the embedded default (SQLite and a filesystem broker) in a fresh folder,
started as a user starts it, with the first key it prints once."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.service import free_port, terminate, wait_for

FIRST_KEY = re.compile(rb"\b(ag_[A-Za-z0-9_-]{43})\b")


@dataclass(frozen=True)
class Embedded:
    url: str
    key: str
    data_dir: Path


@contextlib.contextmanager
def embedded_service(
    command: Sequence[str], data_dir: Path, env: dict[str, str] | None = None
) -> Iterator[Embedded]:
    """Run `command + ["serve", "--port", N]` in `data_dir` until the block ends."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    # Any attempt to reach a real PostgreSQL fails loudly rather than passing by accident.
    base.update({"PGHOST": "127.0.0.1", "PGPORT": "1", **(env or {})})
    log_path = data_dir / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [*command, "serve", "--port", str(port)],
            cwd=data_dir,
            env=base,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/readyz").status_code == 200 and bool(
                    FIRST_KEY.search(log_path.read_bytes())
                )
            except httpx.TransportError:
                return False

        try:
            wait_for(ready, 90.0, "the embedded service ready with its first key")
            key = FIRST_KEY.findall(log_path.read_bytes())[0].decode()
            yield Embedded(url, key, data_dir)
        finally:
            terminate(server)


@contextlib.contextmanager
def tenant_code_worker(
    running: Embedded, tenant: str = "default", code_dir: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """What an operator does for a tenant's code on the embedded service: `assaygate tenants
    allow-code TENANT`, then `python -m worker` with ASSAYGATE_WORKER_TENANT and
    ASSAYGATE_TENANT_CODE_DIR, in the service's folder (so it finds the same database and
    broker); stopped when the block ends."""
    import sys

    from tests.support.service import ROOT, tenant_code

    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env.update({"PGHOST": "127.0.0.1", "PGPORT": "1", "PYTHONPATH": str(ROOT)})
    allowed = subprocess.run(
        [sys.executable, "-m", "service.cli", "tenants", "allow-code", tenant],
        cwd=running.data_dir,
        env=env,
        capture_output=True,
        check=False,
    )
    assert allowed.returncode == 0, allowed.stderr
    log_path = running.data_dir / f"tenant-worker-{tenant}.log"
    env.update(
        ASSAYGATE_WORKER_TENANT=tenant, ASSAYGATE_TENANT_CODE_DIR=str(code_dir or tenant_code())
    )
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "worker", "--hostname", f"tenant-{tenant}@%h"],
            cwd=running.data_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: b" ready." in log_path.read_bytes(), 60.0, f"{tenant}'s worker")
            yield worker
        finally:
            terminate(worker)
