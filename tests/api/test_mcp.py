"""mcp candidates through the service: `POST /v1/candidates`, real Celery workers (each starts the
proxy), the warehouse example's real MCP servers, signed dossiers with contract and invariant
hashes, and the gate reopened by a contract or invariant change."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from service.settings import Settings
from tests.mcp.conftest import Sandbox, sandbox  # noqa: F401 - the fixture
from tests.support.api import decided, dossier, predicate, submit, system_name
from tests.support.keys import KeyBook
from tests.support.service import WorkerProcess, allow_code, in_tenant_code, wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module", autouse=True)
def code_worker(
    settings: Settings,
    engine: sa.Engine,
    keys: KeyBook,
    workers: list[WorkerProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WorkerProcess]:
    """The agent's command runner is the tenant's code: an operator allowed the tenant, and its
    shards run on the tenant's own worker (the shared workers never receive them)."""
    keys.key("ci")  # the tenant exists once it has a key
    allow_code(engine, keys.tenant)
    # The operator's folder is the tests' copy of the checkout's tests and examples: the
    # manifests name the example's agents by their absolute paths in it (`manifest`).
    worker = WorkerProcess(
        settings, f"code-{keys.tenant}", tmp_path_factory.mktemp("code-worker"), tenant=keys.tenant
    )
    try:
        worker.wait_ready()
        yield worker
    finally:
        worker.stop()


def example_manifest(sandbox: Sandbox, agent: str) -> dict[str, Any]:  # noqa: F811
    """The example's manifest for `agent`, its command naming the agent in the tenant's code."""
    return in_tenant_code(sandbox.manifest(agent))


PLAN = {"trials": 1, "seed": 7, "modes": ["ship_order_timeout_after_commit", "forked_run"]}


def warehouse_decided(client: httpx.Client, manifest: dict[str, Any], **kw: Any) -> dict[str, Any]:
    # The shared helper with this file's plan, patience (real MCP servers) and one end: done.
    kw.setdefault("plan", PLAN)
    return decided(client, manifest, timeout=600, statuses=("done",), **kw)


def test_the_careful_agent_is_allowed_by_real_workers_with_contract_and_invariant_hashes(
    client: httpx.Client,
    sandbox: Sandbox,  # noqa: F811
) -> None:
    system = system_name("warehouse")
    careful = example_manifest(sandbox, "careful")
    done = warehouse_decided(client, careful, system=system, version="v1")
    assert done["decision"] == "allow", done["reasons"]
    pred = predicate(dossier(client, done["id"]))
    hashes = pred["manifest"]["component_hashes"]
    assert pred["mcp"]["contract_sha256"] == hashes["tools"]
    assert pred["mcp"]["invariants_sha256"] == hashes["invariants"]
    assert set(pred["mcp"]["invariants_failed"]) == set(PLAN["modes"])
    assert all(not names for names in pred["mcp"]["invariants_failed"].values())
    assert {"tools", "invariants"} <= set(pred["change_triggers"]["hashes"])


def test_a_commit_blind_agent_is_blocked_by_real_workers_and_the_dossier_names_the_invariant(
    client: httpx.Client,
    sandbox: Sandbox,  # noqa: F811
) -> None:
    done = warehouse_decided(
        client, example_manifest(sandbox, "blind"), system=system_name("warehouse"), version="v1"
    )
    assert done["decision"] == "block"
    assert {"duplicate_effect", "unsafe_escape"} <= {r["code"] for r in done["reasons"]}
    failed = predicate(dossier(client, done["id"]))["mcp"]["invariants_failed"]
    assert "duplicate_effect" in failed["ship_order_timeout_after_commit"]


def test_a_changed_invariant_or_contract_reopens_the_gate(
    client: httpx.Client,
    sandbox: Sandbox,  # noqa: F811
) -> None:
    system = system_name("warehouse")
    base = example_manifest(sandbox, "careful")
    warehouse_decided(client, base, system=system, version="v1")
    assert client.get(f"/v1/gate/{system}", params={"version": "v1"}).json()["decision"] == "allow"

    # Each change against the allowed v1 alone, so each names only itself.
    changed = copy.deepcopy(base)
    changed["invariants"]["predicates"][1]["severity"] = "block"
    contract = copy.deepcopy(base)
    contract["tools"]["tools"]["get_stock"]["subject"] = "sku"
    for version, manifest, component in (("v2", changed, "invariants"), ("v3", contract, "tools")):
        pending_candidate = submit(client, manifest, system=system, version=version, plan=PLAN)
        pending = client.get(f"/v1/gate/{system}", params={"version": version}).json()
        assert pending["decision"] == "reopened"
        assert pending["triggers"]["changed"] == [component]
        # Its evidence is not what this test is about: stop it rather than load the workers.
        assay = pending_candidate["assay_id"]
        aborted = client.post(f"/v1/assays/{assay}/abort", json={"reason": "test done"})
        assert aborted.status_code in (202, 409), aborted.text  # 409: it finished first
        final = wait_decided(client, pending_candidate["id"], timeout=600)
        if final["status"] == "stopped":
            after = client.get(f"/v1/gate/{system}", params={"version": version}).json()
            assert after["decision"] == "block", "a stopped assay never allows"


def test_an_invariant_that_does_not_compile_is_refused_naming_its_field(
    client: httpx.Client,
    sandbox: Sandbox,  # noqa: F811
) -> None:
    bad = example_manifest(sandbox, "careful")
    bad["invariants"]["predicates"][0]["expr"] = "new_effects.all(e, "
    response = client.post(
        "/v1/candidates",
        json={
            "system": system_name("warehouse"),
            "version": "v1",
            "source_revision": "abc123",
            "manifest": bad,
            "plan": PLAN,
        },
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "manifest.invariants.predicates.0.expr"
    assert "does not compile" in error["message"]
