"""The sandbox's one way out: the forward proxy on the worker's side, which asks the confinement's
egress check at every connection; and no sandbox at all where bubblewrap cannot build one."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from service.mcp.runners import CommandRunner, RunResult
from service.sandbox import Confinement, bwrap
from service.sandbox.bwrap import SandboxUnavailable
from tests.sandbox.conftest import Worker, serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def model_port() -> Iterator[int]:
    """A real HTTP server standing for a model API the tenant's policy allows."""
    server = serve("the model API")
    yield int(server.server_address[1])
    server.shutdown()


class Policy:
    """An egress check: `model.test` resolves to the loopback stand-in, every other host is
    refused; it records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> str:
        self.asked.append((host, port))
        if host != "model.test":
            raise PermissionError(f"{host} is not an allowed destination")
        return "127.0.0.1"


def run(worker: Worker, proxy_url: str, policy: Policy | None, *args: str) -> RunResult:
    confinement = Confinement(code_dir=worker.code, egress=policy)
    runner = CommandRunner((sys.executable, "attack.py", *args), confinement)
    return runner.run({}, proxy_url, 30.0, threading.Event())


def test_an_allowed_model_api_is_reached_over_plain_http_through_the_egress_proxy(
    worker: Worker, proxy_url: str, model_port: int
) -> None:
    policy = Policy()
    result = run(worker, proxy_url, policy, "fetch", f"http://model.test:{model_port}/v1/chat")
    assert result.claims == [{"leaked": "hello from the model API"}], result
    assert policy.asked == [("model.test", model_port)]


def test_an_allowed_model_api_is_reached_through_a_connect_tunnel(
    worker: Worker, proxy_url: str, model_port: int
) -> None:
    policy = Policy()
    result = run(worker, proxy_url, policy, "tunnel", "model.test", str(model_port))
    assert result.claims == [{"leaked": "hello from the model API"}], result
    assert policy.asked == [("model.test", model_port)]


def test_a_destination_the_egress_check_refuses_is_answered_403(
    worker: Worker, proxy_url: str
) -> None:
    policy = Policy()
    result = run(worker, proxy_url, policy, "tunnel", "169.254.169.254", "80")
    assert result.error == "TargetFailed: exit code 3"
    assert "403 Forbidden" in result.claims[0]["blocked"], result
    plain = run(worker, proxy_url, policy, "fetch", "http://evil.test:80/")
    assert plain.claims == [{"blocked": "HTTPError: HTTP Error 403: Forbidden"}], plain
    assert policy.asked == [("169.254.169.254", 80), ("evil.test", 80)]


def test_without_an_egress_check_there_is_no_way_out(
    worker: Worker, proxy_url: str, model_port: int
) -> None:
    result = run(worker, proxy_url, None, "fetch", f"http://model.test:{model_port}/")
    assert result.error == "TargetFailed: exit code 3"
    assert result.claims[0]["blocked"].startswith("URLError"), result


def test_without_bubblewrap_tenant_code_does_not_run_at_all(
    worker: Worker, proxy_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bwrap, "BWRAP", str(worker.code / "no-bwrap-here"))
    monkeypatch.setattr(bwrap, "_checked", False)
    with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed"):
        run(worker, proxy_url, None, "write", "/tmp/ran")
