"""`assaygate serve` on the embedded default (SQLite and a filesystem broker) in a fresh folder,
started as a user starts it, with the first key it prints once."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.service import free_port, wait_for

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
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
