"""An mcp target's remote endpoints say what they are: an http runner's agent in the
`Assaygate-Build` header of its reply, a server over HTTP in its `serverInfo` (every result of a
2026-era session carries the stamp). The careful warehouse example, which declares its servers'
real builds, has them corroborated in every trial."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.mcp.runners import HttpRunner
from tests.mcp.conftest import Sandbox
from tests.support.service import free_port


class _Agent(BaseHTTPRequestHandler):
    build: str | None = None

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"status": "completed", "effect_id": "s-1"}).encode()
        self.send_response(200)
        if self.build is not None:
            self.send_header("Assaygate-Build", self.build)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def agent() -> Iterator[tuple[str, type[_Agent]]]:
    handler = type("Agent", (_Agent,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", handler
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_runner_reads_the_build_the_agent_names_in_its_reply(
    agent: tuple[str, type[_Agent]],
) -> None:
    url, handler = agent
    runner = HttpRunner(url)
    try:
        handler.build = "agent@2.1 (abc123)"
        named = runner.run({}, "http://proxy/", 5.0, threading.Event())
        handler.build = None
        unnamed = runner.run({}, "http://proxy/", 5.0, threading.Event())
    finally:
        runner.close()
    assert (named.replied, named.build, named.claims[0]["status"]) == (
        True,
        "agent@2.1 (abc123)",
        "completed",
    )
    assert (unnamed.replied, unnamed.build) == (True, None)
    gone = HttpRunner(f"http://127.0.0.1:{free_port()}/")
    try:
        refused = gone.run({}, "http://proxy/", 5.0, threading.Event())
    finally:
        gone.close()
    assert (refused.replied, refused.build) == (False, None)


def test_the_careful_example_declaring_its_servers_builds_is_allowed_with_both_reported(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = sandbox.manifest("careful")
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    code = main(
        ["assay", str(path), "--trials", "2", "--json", "--mode", "ship_order_timeout_after_commit"]
    )
    report = json.loads(capsys.readouterr().out)
    assert (report["decision"], code) == ("allow", 0), report["reasons"]
    for server in ("shop", "admin"):
        entry = report["builds"][f"tools.servers.{server}"]
        assert entry["declared"] == f"warehouse-{server}@1.0.0"
        assert entry["assurance"] == "reported"
        [reported] = entry["reported"]
        assert reported["build"] == entry["declared"] and reported["trials"] >= 4
    [fault] = report["faults"]
    assert set(fault["builds"]) == {"tools.servers.shop", "tools.servers.admin"}
