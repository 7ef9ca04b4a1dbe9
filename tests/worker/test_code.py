"""A worker runs a tenant's code only for its own tenant, while allowed, with a code dir; a lost
code shard is sent again to its tenant's queue, never to the shared one. Real database and Redis."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from service.core.faults.plan import parse_plan
from service.core.shards.assay import plan_shards
from service.core.system.manifest import parse_manifest
from service.db import tenant as tenants
from service.db.apikey import ensure_tenant
from service.db.candidate import record_submission
from service.db.models import Assay, AssayShard, AssayStatus
from service.db.session import session_scope
from service.settings import Settings
from tests.support.service import ROOT, example, grant_injector
from worker.code import confinement_for
from worker.context import WorkerContext
from worker.reconciler import Reconciler
from worker.tasks import execute_shard

pytestmark = pytest.mark.integration

PYTHON_TARGET = {"kind": "python", "entrypoint": "tests.worker.agents.rogue:agent"}


def code_assay(
    engine: sa.Engine, settings: Settings, tenant: str, *, allowed: bool, lease_s: float = 60
) -> uuid.UUID:
    """A python-target assay of `tenant` recorded as the API records one, with no message sent."""
    manifest = parse_manifest({**example("typed"), "target": PYTHON_TARGET})
    plan = parse_plan({"trials": 2, "seed": 5, "modes": ["subject_swap"]})
    with session_scope(engine) as session:
        row = ensure_tenant(session, tenant)
        tenants.set_code_allowed(session, row, allowed)
        recorded = record_submission(
            session,
            tenant_id=row.id,
            system_name=f"code-{uuid.uuid4().hex[:8]}",
            version="1",
            source_revision="direct",
            manifest=manifest,
            plan_document=plan.model_dump(mode="json"),
            catalogue=plan.resolve_catalogue().version,
            shards=plan_shards(manifest, plan, trials_per_shard=10),
            lease_s=lease_s,
        )
        grant_injector(session, settings, recorded.assay, plan)
    return recorded.assay.id


def worker_of(settings: Settings, tenant: str | None, code_dir: Path | None) -> WorkerContext:
    return WorkerContext(
        settings.model_copy(update={"worker_tenant": tenant, "tenant_code_dir": code_dir})
    )


def outcome(engine: sa.Engine, assay_id: uuid.UUID) -> tuple[Assay, AssayShard]:
    with Session(engine) as session:
        assay = session.get(Assay, assay_id)
        shard = session.get(AssayShard, (assay_id, 0))
        assert assay is not None and shard is not None
        return assay, shard


@pytest.mark.parametrize(
    ("worker_tenant", "code_dir", "allowed", "reason"),
    [
        (None, ROOT, True, "a shared worker never runs it"),
        ("someone-else", ROOT, True, "tenant someone-else's worker never runs it"),
        ("{tenant}", None, True, "started without ASSAYGATE_TENANT_CODE_DIR"),
        ("{tenant}", ROOT, False, "no longer allowed to run code"),
    ],
)
def test_a_worker_that_may_not_run_a_code_shard_fails_its_assay_and_never_starts_it(
    engine: sa.Engine,
    settings: Settings,
    worker_tenant: str | None,
    code_dir: Path | None,
    allowed: bool,
    reason: str,
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    assay_id = code_assay(engine, settings, tenant, allowed=allowed)
    named = worker_tenant.format(tenant=tenant) if worker_tenant else None
    result = execute_shard(worker_of(settings, named, code_dir), assay_id, 0, "w")
    assert result["stored"] is False
    assay, shard = outcome(engine, assay_id)
    assert assay.status == AssayStatus.FAILED
    assert assay.report is not None and reason in assay.report["error"]
    assert "manifest.target.entrypoint (python)" in assay.report["error"]
    assert shard.worker is None and shard.attempts == 0


def test_the_tenants_own_worker_runs_its_allowed_code_in_its_confinement(
    engine: sa.Engine, settings: Settings
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    assay_id = code_assay(engine, settings, tenant, allowed=True)
    ctx = worker_of(settings, tenant, ROOT)
    parsed = ctx.assay(assay_id)
    assert parsed is not None and parsed.inputs.tenant == tenant
    secrets = ctx.secrets(parsed.inputs, parsed.manifest)
    confinement = confinement_for(ctx.settings, parsed.manifest, secrets, None)
    assert confinement is not None and confinement.code_dir == ROOT
    assert confinement.limits.cpu_s == settings.code_cpu_s
    assert dict(confinement.env) == {}  # no secrets named, nothing of the worker's environment
    with Session(engine) as session:
        count = session.get(Assay, assay_id).shard_count  # type: ignore[union-attr]
    for index in range(count):
        execute_shard(ctx, assay_id, index, "tenant-w")
    assay, shard = outcome(engine, assay_id)
    assert assay.status == AssayStatus.DONE, assay.report
    assert shard.worker == "tenant-w"


def purge(reconciler: Reconciler, queue: str) -> None:
    with reconciler.client.connection_for_write() as connection:
        connection.default_channel.queue_purge(queue)


def test_a_lost_code_shard_is_sent_again_to_its_tenants_queue_and_not_the_shared_one(
    engine: sa.Engine, settings: Settings
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    own = settings.tenant_queue(tenant)
    assay_id = code_assay(engine, settings, tenant, allowed=True, lease_s=0.001)
    reconciler = Reconciler(settings, "r-code")
    try:
        purge(reconciler, settings.queue)
        time.sleep(0.01)
        done = reconciler.run_once()
        mine = reconciler.queue_depth(own)
    finally:
        reconciler.client.close()
    assert done.queue_depths[own] == 0  # measured on its own, before the send
    with Session(engine) as session:
        count = session.get(Assay, assay_id).shard_count  # type: ignore[union-attr]
    # Each of its shards sent once more, and every one of those messages is in its own queue.
    assert mine == count
    _, shard = outcome(engine, assay_id)
    assert shard.dispatches == 2
