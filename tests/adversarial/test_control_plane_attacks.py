"""Tenant code that tunnels through its sandbox's egress proxy to the gate itself: the API by every
spelling of loopback, another trial's MCP proxy, another tenant's relay. Loopback is allowed for
the agents' local services (the docs' "where allowed"), by the deprecated `1` or by port; none of
the gate's own addresses is reachable either way."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.mcp.runners import CommandRunner, RunResult
from service.net.egress import EgressPolicy
from service.sandbox import Confinement, relay
from service.settings import Settings
from tests.net.test_egress import production
from tests.sandbox.conftest import ATTACK, serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("code")
    (folder / "attack.py").write_text(ATTACK)
    folder.chmod(0o755)
    (folder / "attack.py").chmod(0o644)
    return folder


@pytest.fixture(scope="module")
def api_port() -> Iterator[int]:
    """A real HTTP server on 127.0.0.1 standing for the gate's API."""
    server = serve("the gate's API")
    yield int(server.server_address[1])
    server.shutdown()


@pytest.fixture(scope="module")
def agent_port() -> Iterator[int]:
    """A real HTTP server on loopback standing for the agent's own local model server."""
    server = serve("the agent's model")
    yield int(server.server_address[1])
    server.shutdown()


def tunnel(code: Path, settings: Settings, host: str, port: int) -> RunResult:
    policy = EgressPolicy.from_settings(settings)
    confinement = Confinement(code_dir=code, egress=policy.resolve)
    runner = CommandRunner((sys.executable, "attack.py", "tunnel", host, str(port)), confinement)
    # The trial's proxy URL is the one relayed port; nothing listens behind it here.
    return runner.run({}, "http://127.0.0.1:40999/t/none/mcp", 30.0, threading.Event())


def refused(result: RunResult) -> str:
    assert result.claims and "blocked" in result.claims[0], result
    reason = str(result.claims[0]["blocked"])
    assert "403 Forbidden" in reason, reason
    return reason


SPELLINGS = ["127.0.0.1", "localhost", "127.1", "[::1]", "2130706433", "0x7f000001", "0177.0.0.1"]


@pytest.mark.parametrize("host", SPELLINGS)
def test_code_that_tunnels_to_the_api_by_any_spelling_of_loopback_is_refused(
    code: Path, tmp_path: Path, api_port: int, host: str
) -> None:
    settings = production(tmp_path, port=api_port, egress_allow_loopback="1")
    refused(tunnel(code, settings, host, api_port))


def test_code_that_tunnels_to_the_advertised_api_is_refused_where_the_worker_listens_elsewhere(
    code: Path, tmp_path: Path, api_port: int
) -> None:
    """The compose shape: the worker's own ASSAYGATE_PORT is not the API's; the shared
    ASSAYGATE_CONTROL_PLANE names it."""
    settings = production(
        tmp_path, egress_allow_loopback="1", control_plane=f"http://localhost:{api_port}"
    )
    refused(tunnel(code, settings, "127.0.0.1", api_port))


def test_code_that_tunnels_to_another_trials_proxy_or_another_tenants_relay_is_refused(
    code: Path, tmp_path: Path
) -> None:
    settings = production(tmp_path, egress_allow_loopback="1")
    # Another sandbox's inbound relay, exactly as the worker serves it.
    server, port = relay.run(relay.serve_inbound(str(tmp_path / "in.sock")))
    try:
        host = str(server.sockets[0].getsockname()[0])
        assert host == "127.77.0.1"
        refused(tunnel(code, settings, host, port))
        # The same port on 127.0.0.1 is allowed and holds nothing of the gate's.
        elsewhere = tunnel(code, settings, "127.0.0.1", port)
        assert "blocked" in elsewhere.claims[0], elsewhere
    finally:
        relay.call(server.close)


def test_a_loopback_allowance_by_port_reaches_those_ports_and_no_other(
    code: Path, tmp_path: Path, agent_port: int, api_port: int
) -> None:
    settings = production(tmp_path, port=8000, egress_allow_loopback=f"{agent_port}")
    reached = tunnel(code, settings, "127.0.0.1", agent_port)
    assert reached.claims == [{"leaked": "hello from the agent's model"}], reached
    refused(tunnel(code, settings, "127.0.0.1", api_port))
