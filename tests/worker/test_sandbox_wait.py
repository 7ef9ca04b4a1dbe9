"""A worker's mcp engine locks its world per tenant; a trial that waits for it says whom it waits
for in the assay's events, and past its bound is a `SandboxBusy` target error naming the holder."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from service.core.faults.contract_catalogue import plan_data_for
from service.core.faults.plan import parse_plan
from service.core.shards.assay import plan_shards
from service.core.system.manifest import Manifest, contract_of, parse_manifest
from service.db.apikey import ensure_tenant
from service.db.assay import AssayInputs, assay_inputs
from service.db.candidate import record_submission
from service.db.models import Event
from service.db.session import session_scope
from service.mcp.engine import McpEngine
from service.mcp.lock import sandbox_lock, world_key
from service.settings import Settings
from service.targets import close_target
from tests.mcp.conftest import Sandbox
from tests.support.service import grant_injector, tenant_code
from worker.context import WorkerContext

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def world(sandbox: Sandbox) -> Sandbox:
    """The warehouse example's real MCP servers (tests/mcp/conftest.py)."""
    return sandbox


def tenant_worker(settings: Settings) -> Settings:
    """acme's own worker: the manifests here run its code (a command runner), in the sandbox."""
    return settings.model_copy(update={"worker_tenant": "acme", "tenant_code_dir": tenant_code()})


def submitted(engine: sa.Engine, settings: Settings, manifest: Manifest) -> AssayInputs:
    parsed = parse_plan(plan_data_for(manifest, {"trials": 1, "seed": 9, "modes": ["forked_run"]}))
    with session_scope(engine) as session:
        recorded = record_submission(
            session,
            tenant_id=ensure_tenant(session, "acme").id,
            system_name=f"warehouse-{uuid.uuid4().hex[:6]}",
            version="1.0.0",
            source_revision="direct",
            manifest=manifest,
            plan_document=parsed.model_dump(mode="json"),
            catalogue=parsed.resolve_catalogue().version,
            shards=plan_shards(manifest, parsed, trials_per_shard=20),
        )
        grant_injector(session, settings, recorded.assay, parsed)
        assay_id = recorded.assay.id
    with Session(engine) as session:
        inputs = assay_inputs(session, assay_id)
    assert inputs is not None
    return inputs


def test_a_trial_waiting_for_its_tenants_world_names_the_holder_in_the_assays_events(
    engine: sa.Engine, settings: Settings, world: Sandbox
) -> None:
    manifest = parse_manifest(world.manifest("careful"))
    inputs = submitted(engine, settings, manifest)
    with Session(engine) as session:
        acme = ensure_tenant(session, "acme").id
    assert inputs.tenant_id == acme
    ctx = WorkerContext(tenant_worker(settings))
    target = ctx.target(inputs.assay_id, manifest, inputs)
    try:
        assert isinstance(target, McpEngine)
        assert target.world == world_key(contract_of(manifest), acme.hex)
        assert target.holder == str(inputs.assay_id)
        target.lock_wait_s = 0.3
        with sandbox_lock(target.world, "assay-holding-the-world", 5.0):
            busy = target.run_trial(None, 1, 1, frozenset(), False)
        assert "sandbox busy" in str(busy.target_error)
        assert "held by assay assay-holding-the-world" in str(busy.target_error)
        with Session(engine) as session:
            notes = session.exec(
                select(Event).where(
                    Event.kind == "sandbox.waiting", Event.assay_id == inputs.assay_id
                )
            ).all()
        assert [n.data["note"] for n in notes] == [
            f"waiting for sandbox {target.world}, held by assay assay-holding-the-world"
        ]
    finally:
        close_target(target)


def test_the_worker_refuses_a_world_its_egress_policy_forbids(
    engine: sa.Engine, settings: Settings, world: Sandbox, tmp_path: Path
) -> None:
    data = world.manifest("careful")
    data["tools"]["servers"]["admin"] = {"url": f"http://127.0.0.1:{settings.port}/mcp"}
    manifest = parse_manifest(data)
    inputs = submitted(engine, settings, manifest)
    target = WorkerContext(tenant_worker(settings)).target(inputs.assay_id, manifest, inputs)
    try:
        assert isinstance(target, McpEngine)
        rec = target.run_trial(None, 1, 1, frozenset(), False)
        assert str(rec.target_error).startswith("TargetUnreachable: egress refused")
        assert "the gate's own API" in str(rec.target_error)
    finally:
        close_target(target)
