"""The warehouse example as a newcomer starts it: a hint to use the virtualenv's Python when the
`mcp` SDK or uvloop cannot be imported, ports from WAREHOUSE_SHOP_PORT / WAREHOUSE_ADMIN_PORT, a
`ready` line once both servers listen, and `servers.py manifest NAME` writing a manifest with the
chosen ports that the assay accepts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from service.core.system.manifest import parse_manifest_json
from tests.mcp.conftest import EXAMPLE, free_port

SERVERS = str(EXAMPLE / "servers.py")


def test_without_the_sdk_it_says_to_use_the_virtualenv_python_in_one_line() -> None:
    # -S: no site-packages, as the system's python that lacks Assaygate's dependencies.
    done = subprocess.run(
        [sys.executable, "-S", SERVERS, "http", "--db", "x.db"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "cannot import" in done.stderr and ".venv/bin/python" in done.stderr


def test_ports_come_from_the_environment_and_a_ready_line_says_when_to_start(
    tmp_path: Path,
) -> None:
    shop, admin = free_port(), free_port()
    env = {**os.environ, "WAREHOUSE_SHOP_PORT": str(shop), "WAREHOUSE_ADMIN_PORT": str(admin)}
    proc = subprocess.Popen(
        [sys.executable, SERVERS, "http", "--db", str(tmp_path / "world.db")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("warehouse: ready: "), line
        assert f"http://127.0.0.1:{shop}/mcp" in line and f"http://127.0.0.1:{admin}/mcp" in line
        # Ready means listening: both accept a connection at once.
        for port in (shop, admin):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_manifest_subcommand_writes_the_chosen_ports_and_this_python() -> None:
    env = {**os.environ, "WAREHOUSE_SHOP_PORT": "9101"}
    done = subprocess.run(
        [sys.executable, SERVERS, "manifest", "careful", "--admin-port", "9102"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(done.stdout)
    servers = data["tools"]["servers"]
    # The ports move; the builds the servers report stay declared.
    assert servers == {
        "shop": {"url": "http://127.0.0.1:9101/mcp", "build": "warehouse-shop@1.0.0"},
        "admin": {"url": "http://127.0.0.1:9102/mcp", "build": "warehouse-admin@1.0.0"},
    }
    assert data["target"]["runner"]["command"][0] == sys.executable
    assert parse_manifest_json(done.stdout).system == "warehouse-agent"


def test_a_port_variable_that_is_not_a_port_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, SERVERS, "manifest", "careful"],
        env={**os.environ, "WAREHOUSE_ADMIN_PORT": "eighty"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "WAREHOUSE_ADMIN_PORT" in done.stderr
