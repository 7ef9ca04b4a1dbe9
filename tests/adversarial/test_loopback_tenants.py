"""Loopback allowances are each tenant's own (B6), through the real service: two tenants whose
workers share a host, each with a local service on a loopback port the operator allowed to that
tenant alone (`ASSAYGATE_EGRESS_LOOPBACK_TENANTS`). Tenant A's code reaches its own service and
never B's, and A's webhook can neither be aimed at B's port nor be sent there."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from service.app.webhooks import AttemptOutcome, Outgoing
from tests.adversarial.deployment import (
    SHARED_LOOPBACK,
    Deployment,
    Witness,
    deployment,
    submit_target,
    witnessed,
)
from tests.support.service import wait_decided, wait_for
from worker.webhooks import post

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

A, B = "loop-a", "loop-b"
PLAN = {"trials": 1, "seed": 3, "modes": ["timeout_before_send"]}


class Own(Witness):
    """Tenant A's local service."""

    reports: ClassVar[dict[str, list[dict[str, Any]]]] = {}


class Theirs(Witness):
    """Tenant B's local service, on a port allowed to B alone."""

    reports: ClassVar[dict[str, list[dict[str, Any]]]] = {}


@pytest.fixture(scope="module")
def shared_host(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Deployment, int, int]]:
    with (
        witnessed(Own) as own,
        witnessed(Theirs) as theirs,
        deployment(
            tmp_path_factory.mktemp("loopback"),
            "loopback",
            {A: {}, B: {}},
            egress_allow_loopback="0",
            egress_loopback_tenants=f"{A}={own};{B}={theirs}",
        ) as service,
    ):
        yield service, own, theirs


def test_a_tenants_code_reaches_its_own_loopback_service_and_never_anothers(
    shared_host: tuple[Deployment, int, int],
) -> None:
    service, own, theirs = shared_host
    target = {
        "kind": "python",
        "entrypoint": "tests.adversarial.agents.neighbour:agent",
        "env": {"WITNESS_PORT": str(own), "NEIGHBOUR_PORT": str(theirs)},
    }
    with service.submitter(A) as client:
        submitted = submit_target(client, target, PLAN, "loop")
        # Its own service heard from it (so the code ran and its own port is open to it)...
        wait_for(lambda: "neighbour" in Own.reports, 120, "A's code at its own service")
        wait_decided(client, submitted["id"], timeout=120)
    [said] = Own.reports["neighbour"][:1]
    # ...and the proxy refused the neighbour's port, which heard nothing.
    assert " 200 " not in said["status"] + " ", said
    assert Theirs.reports == {}


def test_a_tenants_webhook_may_be_aimed_at_its_own_loopback_port_and_not_anothers(
    shared_host: tuple[Deployment, int, int],
) -> None:
    service, own, theirs = shared_host
    with service.admin(A) as client:
        refused = client.post("/v1/webhooks", json={"url": f"http://127.0.0.1:{theirs}/hook"})
        allowed = client.post("/v1/webhooks", json={"url": f"http://127.0.0.1:{own}/hook"})
    assert refused.status_code == 422, refused.text
    assert "egress refused" in refused.text and '"url"' in refused.text
    assert allowed.status_code == 201, allowed.text


def test_a_webhook_already_aimed_at_another_tenants_port_is_refused_when_it_is_sent(
    shared_host: tuple[Deployment, int, int], tmp_path: Path
) -> None:
    service, _, theirs = shared_host
    Theirs.reports.clear()
    url = f"http://127.0.0.1:{theirs}/report"

    def sent_by(tenant: str) -> AttemptOutcome:
        body = '{"kind": "webhook", "event": "hold.opened", "links": {}}'
        out = Outgoing(uuid.uuid4(), 1, "hold.opened", url, "json", "whsec_t", body, tenant)
        return post(service.settings, out).outcome

    assert sent_by(A) is AttemptOutcome.REFUSED
    assert Theirs.reports == {}
    assert sent_by(B) is AttemptOutcome.DELIVERED  # B's own port, from B's webhook


def test_no_worker_warns_of_a_shared_loopback_where_each_tenant_has_its_own_ports(
    shared_host: tuple[Deployment, int, int],
) -> None:
    service, _, _ = shared_host
    assert service.logged(SHARED_LOOPBACK) == {name: [] for name in service.workers}
