"""The warehouse example's real MCP servers (official SDK over SQLite), started per test module."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.service import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mcp-warehouse"


def wait_port(
    port: int, timeout: float = 120.0, server: subprocess.Popen[bytes] | None = None
) -> None:
    """Until something listens on `port` (an error at once if `server` exits first). A guard
    against a hang, not a speed check: the first servers of a fresh clone's run import the MCP
    SDK into an empty bytecode cache while the other test process does the same, and on a busy
    2-core box that took over 30 s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if server is not None and server.poll() is not None:
            raise RuntimeError(f"the server for port {port} exited with {server.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} did not come up within {timeout:.0f} s")


class Sandbox:
    def __init__(self, db: Path, shop_port: int, admin_port: int) -> None:
        self.db = db
        self.shop = f"http://127.0.0.1:{shop_port}/mcp"
        self.admin = f"http://127.0.0.1:{admin_port}/mcp"

    def manifest(
        self,
        agent: str,
        *,
        stdio: bool = False,
        stdio_servers: bool = False,
        warm: bool = False,
        **over: Any,
    ) -> dict[str, Any]:
        """The example's manifest for `agent`; `warm`: the agent kept warm (`protocol: "lines"`,
        one process for the assay), for a test whose claim is not the interpreter-per-run
        protocol and that would otherwise pay a second of interpreter start per run."""
        data: dict[str, Any] = json.loads((EXAMPLE / "manifest.careful.json").read_text())
        command = [sys.executable, str(EXAMPLE / "agents.py"), agent]
        if stdio:
            command.append("--stdio")
        if warm:
            command.append("--lines")
            data["target"]["runner"]["protocol"] = "lines"
        data["version"] = f"1.0.0-{agent}"
        data["target"]["runner"]["command"] = command
        servers = data["tools"]["servers"]
        if stdio_servers:
            run = [sys.executable, str(EXAMPLE / "servers.py")]
            servers["shop"] = {"command": [*run, "shop-stdio", "--db", str(self.db)]}
            servers["admin"] = {"command": [*run, "admin-stdio", "--db", str(self.db)]}
        else:
            # The example's declared builds stay: only the URLs move.
            servers["shop"] = {**servers["shop"], "url": self.shop}
            servers["admin"] = {**servers["admin"], "url": self.admin}
        data.update(over)
        return data


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    db = tmp_path_factory.mktemp("warehouse") / "world.db"
    shop, admin = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE / "servers.py"),
            "http",
            "--db",
            str(db),
            "--shop-port",
            str(shop),
            "--admin-port",
            str(admin),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(shop, server=proc)
        wait_port(admin, server=proc)
        yield Sandbox(db, shop, admin)
    finally:
        proc.terminate()
        proc.wait(10)
