"""One tenant cannot starve another, through the real service: two tenants, each with its own
tenant worker (PostgreSQL, Redis, the API, a shared worker, bubblewrap). Tenant A's python target
fork-bombs its sandbox and holds every process it got; while it holds them, tenant B's assay
starts its sandbox, runs and is decided normally, and A's bomb is stopped at its own limit."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.adversarial.deployment import Deployment, Witness, deployment, witness_server
from tests.support.service import example, wait_decided, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

BOMBER, NEIGHBOUR = "bomber", "neighbour"
PROCESSES = 32  # each tree's task limit, small so the bomb reaches it at once
PLAN = {"trials": 1, "seed": 3, "modes": ["timeout_before_send"]}
LIMITS = {"ASSAYGATE_CODE_PROCESSES": str(PROCESSES)}


@pytest.fixture(scope="module")
def two_tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, int]]:
    folder = tmp_path_factory.mktemp("starve")
    witness = witness_server()
    try:
        with deployment(folder, "starve", {BOMBER: LIMITS, NEIGHBOUR: LIMITS}) as service:
            yield service, int(witness.server_address[1])
    finally:
        witness.shutdown()


def submit(client: httpx.Client, entrypoint: str, env: dict[str, str]) -> dict[str, Any]:
    target = {"kind": "python", "entrypoint": entrypoint, "env": env}
    body = {
        "system": f"starve-{uuid.uuid4().hex[:8]}",
        "version": "v1",
        "source_revision": "abc123",
        "manifest": {**example("typed"), "target": target},
        "plan": PLAN,
    }
    response = client.post("/v1/candidates", json=body)
    assert response.status_code == 202, response.text
    candidate: dict[str, Any] = response.json()
    return candidate


def test_a_tenants_fork_bomb_never_stops_another_tenants_sandbox_from_starting(
    two_tenants: tuple[Deployment, int],
) -> None:
    service, witness_port = two_tenants
    Witness.reports.pop("bomb", None)
    with service.submitter(BOMBER) as bomber, service.submitter(NEIGHBOUR) as neighbour:
        env = {"WITNESS_PORT": str(witness_port), "HOLD_S": "8"}
        bomb = submit(bomber, "tests.adversarial.agents.bomb:agent", env)
        wait_for(lambda: "bomb" in Witness.reports, 120, "the bomb at its limit")
        [held] = Witness.reports["bomb"][:1]
        # A's tree is at its own limit, and holds it.
        assert held["stopped_by"] != "never" and held["holding"] < PROCESSES, held

        started = time.monotonic()
        other = submit(neighbour, "tests.worker.agents.rogue:agent", {})
        done = wait_decided(neighbour, other["id"], timeout=120)
        took = time.monotonic() - started
        # B's sandbox started and its agent ran, while A's bomb still held its processes.
        assert done["status"] == "done", done
        assert "target_errors" not in {r["code"] for r in done["reasons"]}, done["reasons"]
        assert bomber.get(f"/v1/candidates/{bomb['id']}").json()["status"] != "done", took

        stopped = wait_decided(bomber, bomb["id"], timeout=240)
    assert stopped["status"] == "done", stopped
    errors = " ".join(r["message"] for r in stopped["reasons"] if r["code"] == "target_errors")
    assert "fork bomb stopped after" in errors, stopped["reasons"]
