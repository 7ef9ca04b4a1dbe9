"""Attacks that point the gate at what it must never call: its own control plane behind a
loopback port, directly, by a redirect, or by a name that re-binds after submission. The worker
sends nothing there, and nothing from there reaches the submitter's report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.net.egress import EgressPolicy
from service.targets import close_target, load_target
from tests.adversarial.conftest import manifest, plan
from tests.net.servers import Served, serving
from tests.net.test_egress import Rebinding, production
from tests.targets.conftest import assay

SECRET = b'{"claim": {"status": "completed", "ledger_ref": "INTERNAL-SECRET-7f3a"}}'
MODE = "subject_swap"


@pytest.fixture
def control_plane(tmp_path: Path) -> Iterator[tuple[EgressPolicy, Served]]:
    """A loopback service that answers like an agent with a secret, standing for the gate's own
    API (the worker's policy names its port), under a policy that allows loopback otherwise."""
    with serving(body=SECRET) as service:
        settings = production(tmp_path, port=service.port, egress_allow_loopback=True)
        yield EgressPolicy.from_settings(settings, Rebinding()), service


def assayed(url: str, policy: EgressPolicy) -> dict[str, object]:
    m = manifest("typed", kind="http", url=url)
    target = load_target(m, http_timeout_s=2, egress=policy)
    try:
        return assay(m, plan(3, MODE), target)
    finally:
        close_target(target)


def test_a_target_at_the_gates_own_api_gets_no_post_and_its_reply_never_reaches_the_report(
    control_plane: tuple[EgressPolicy, Served],
) -> None:
    policy, service = control_plane
    report = assayed(f"http://127.0.0.1:{service.port}/v1/assays", policy)
    assert service.hits == []
    assert report["decision"] != "allow"
    assert "INTERNAL-SECRET" not in json.dumps(report)
    assert "TargetUnreachable" in json.dumps(report["reasons"])


def test_a_target_that_redirects_to_the_gates_own_api_gets_no_hop_made(
    control_plane: tuple[EgressPolicy, Served],
) -> None:
    policy, service = control_plane
    with serving(redirect_to=f"http://127.0.0.1:{service.port}/v1/assays") as redirector:
        report = assayed(redirector.url, policy)
    assert redirector.hits and service.hits == []
    assert report["decision"] != "allow"
    assert "INTERNAL-SECRET" not in json.dumps(report)


def test_a_target_whose_name_rebinds_to_the_gates_own_api_after_submission_gets_no_post(
    control_plane: tuple[EgressPolicy, Served],
) -> None:
    policy, service = control_plane
    url = f"http://rebind.example:{service.port}/v1/assays"
    policy.check_url(url, "manifest.target.url")  # public when the API checked it
    report = assayed(url, policy)
    assert service.hits == []
    assert report["decision"] != "allow"
    assert "INTERNAL-SECRET" not in json.dumps(report)
