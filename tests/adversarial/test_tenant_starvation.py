"""One tenant cannot starve another, through the real service: two tenants, each with its own
tenant worker (PostgreSQL, Redis, the API, a shared worker, bubblewrap). Tenant A's python target
fork-bombs its sandbox and holds every process it got; while it holds them, tenant B's assay
starts its sandbox, runs and is decided normally, and A's bomb is stopped at its own limit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.adversarial.deployment import Deployment, Witness, deployment, submit_target, witnessed
from tests.support.service import wait_decided, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

BOMBER, NEIGHBOUR = "bomber", "neighbour"
PROCESSES = 32  # each tree's task limit, small so the bomb reaches it at once
PLAN = {"trials": 1, "seed": 3, "modes": ["timeout_before_send"]}
LIMITS = {"ASSAYGATE_CODE_PROCESSES": str(PROCESSES)}


@pytest.fixture(scope="module")
def two_tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, int]]:
    folder = tmp_path_factory.mktemp("starve")
    tenants = {BOMBER: LIMITS, NEIGHBOUR: LIMITS}
    with witnessed() as port, deployment(folder, "starve", tenants) as service:
        yield service, port


def submit(client: httpx.Client, entrypoint: str, env: dict[str, str]) -> dict[str, Any]:
    target = {"kind": "python", "entrypoint": entrypoint, "env": env}
    return submit_target(client, target, PLAN, "starve")


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
