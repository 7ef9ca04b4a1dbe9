"""The worker's clients connect only where the egress policy allows: an http target, an http
runner and the MCP engine's upstreams. A refusal is the trial's target error, never a crash, and
the forbidden service receives nothing — redirected to, or re-bound to after submission."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.core.faults.contract_catalogue import catalogue_for
from service.core.system.manifest import parse_manifest
from service.mcp.engine import McpEngine
from service.mcp.runners import HttpRunner
from service.net.egress import EgressPolicy
from service.targets import HttpTarget
from tests.mcp.conftest import Sandbox
from tests.net.servers import Served, serving
from tests.net.test_egress import FIELD, Rebinding, production
from tests.targets.conftest import example
from tests.targets.test_target_errors import first_trial_error

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def forbidden(tmp_path: Path) -> Iterator[tuple[EgressPolicy, Served]]:
    """A loopback service standing for the gate's own API (the policy names its port as the
    API's), under a production policy that otherwise allows loopback."""
    with serving() as service:
        settings = production(tmp_path, port=service.port, egress_allow_loopback=True)
        yield EgressPolicy.from_settings(settings), service


def test_an_http_target_at_the_gates_own_port_is_a_target_error_and_reaches_nothing(
    forbidden: tuple[EgressPolicy, Served],
) -> None:
    policy, service = forbidden
    url = f"http://localhost:{service.port}/"
    with HttpTarget(url, timeout_s=2, egress=policy) as target:
        error = first_trial_error(example("typed", kind="http", url=url), target)
    assert error is not None and error.startswith("TargetUnreachable: egress refused")
    assert "the gate's own API" in error
    assert service.hits == []


def test_an_http_target_that_redirects_to_the_gates_own_port_never_makes_the_hop(
    forbidden: tuple[EgressPolicy, Served],
) -> None:
    policy, service = forbidden
    with serving(redirect_to=f"http://127.0.0.1:{service.port}/v1/assays") as redirector:
        policy.check_url(redirector.url, FIELD)  # what submission saw: allowed
        with HttpTarget(redirector.url, timeout_s=2, egress=policy) as target:
            manifest = example("typed", kind="http", url=redirector.url)
            error = first_trial_error(manifest, target)
    assert error is not None and error.startswith("TargetServerError")
    assert redirector.hits and service.hits == []


def test_an_http_target_whose_name_rebinds_after_submission_is_refused_at_connection(
    tmp_path: Path,
) -> None:
    with serving() as service:
        policy = EgressPolicy.from_settings(production(tmp_path), Rebinding())
        url = f"http://rebind.example:{service.port}/"
        policy.check_url(url, FIELD)
        with HttpTarget(url, timeout_s=2, egress=policy) as target:
            error = first_trial_error(example("typed", kind="http", url=url), target)
    assert error is not None and error.startswith("TargetUnreachable: egress refused")
    assert service.hits == []


def test_an_http_runner_refused_or_redirected_is_a_target_error_and_reaches_nothing(
    forbidden: tuple[EgressPolicy, Served],
) -> None:
    policy, service = forbidden
    crashed = threading.Event()
    runner = HttpRunner(f"http://127.0.0.1:{service.port}/run", policy)
    try:
        result = runner.run({}, "http://127.0.0.1:1/mcp", 2.0, crashed)
    finally:
        runner.close()
    assert str(result.error).startswith("TargetUnreachable: egress refused")
    with serving(redirect_to=f"http://127.0.0.1:{service.port}/run") as redirector:
        runner = HttpRunner(redirector.url, policy)
        try:
            redirected = runner.run({}, "http://127.0.0.1:1/mcp", 2.0, crashed)
        finally:
            runner.close()
    assert redirected.error == "TargetFailed: HTTP 302"
    assert service.hits == []


def test_an_mcp_engine_whose_server_is_refused_records_target_errors_and_connects_nowhere(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    data: dict[str, Any] = sandbox.manifest("careful")
    manifest = parse_manifest(data)
    engine = McpEngine(
        manifest, catalogue_for(manifest), egress=EgressPolicy.from_settings(production(tmp_path))
    )
    try:
        rec = engine.run_trial(None, 1, 1, frozenset(), False)
    finally:
        engine.close()
    assert rec.outcome.verdict == "hold"
    assert str(rec.target_error).startswith("TargetUnreachable: egress refused")
    assert "manifest.tools.servers.admin.url" in str(rec.target_error)


def test_an_mcp_server_name_that_rebinds_after_the_check_is_refused_by_the_sdk_transport(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    data: dict[str, Any] = sandbox.manifest("careful")
    for name in ("shop", "admin"):
        port = data["tools"]["servers"][name]["url"].rsplit(":", 1)[1]
        data["tools"]["servers"][name] = {"url": f"http://rebind.example:{port}"}
    manifest = parse_manifest(data)
    resolver = Rebinding(public_answers=2)  # the engine's check of both servers
    policy = EgressPolicy.from_settings(production(tmp_path), resolver)
    engine = McpEngine(manifest, catalogue_for(manifest), egress=policy)
    try:
        rec = engine.run_trial(None, 1, 1, frozenset(), False)
    finally:
        engine.close()
    assert str(rec.target_error).startswith("TargetUnreachable: egress refused")
    assert "rebind.example resolves to 127.0.0.1" in str(rec.target_error)
