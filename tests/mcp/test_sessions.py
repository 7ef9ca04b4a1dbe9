"""The engine's upstream sessions live for the whole assay: a sandbox restarted between trials
is reconnected (the world hooks are sent again on a fresh session), not a hold for every trial
after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from service.core.faults.contract_catalogue import catalogue_for
from service.core.system.manifest import parse_manifest
from service.mcp.engine import McpEngine
from tests.mcp.conftest import EXAMPLE, free_port, wait_port

pytestmark = pytest.mark.timeout(300)


def test_a_restarted_sandbox_is_reconnected(tmp_path: Path) -> None:
    shop, admin = free_port(), free_port()
    command = [
        sys.executable,
        str(EXAMPLE / "servers.py"),
        "http",
        "--db",
        str(tmp_path / "world.db"),
        "--shop-port",
        str(shop),
        "--admin-port",
        str(admin),
    ]

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(shop)
        wait_port(admin)
        return proc

    data = json.loads((EXAMPLE / "manifest.careful.json").read_text())
    data["tools"]["servers"] = {
        "shop": {"url": f"http://127.0.0.1:{shop}/mcp"},
        "admin": {"url": f"http://127.0.0.1:{admin}/mcp"},
    }
    data["target"]["runner"]["command"] = [sys.executable, str(EXAMPLE / "agents.py"), "careful"]
    manifest = parse_manifest(data)
    proc = start()
    engine = McpEngine(manifest, catalogue_for(manifest))
    try:
        assert engine.run_trial(None, 1, 1, frozenset(), False).outcome.verdict == "release"
        proc.terminate()
        proc.wait(10)
        down = engine.run_trial(None, 2, 2, frozenset(), False)
        assert down.outcome.verdict == "hold" and "HookFailed" in str(down.target_error)
        proc = start()
        after = engine.run_trial(None, 3, 3, frozenset(), False)
        assert after.outcome.verdict == "release", after.target_error
        assert engine.upstreams.reopened >= 1
    finally:
        engine.close()
        proc.terminate()
        proc.wait(10)
