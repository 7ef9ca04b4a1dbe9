"""An assay recorded straight through the db layer, as the API would record it, for the worker
tests that run its shards themselves (no API, no broker)."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from service.core.faults.plan import parse_plan
from service.core.shards.assay import plan_shards
from service.core.system.manifest import parse_manifest
from service.db.apikey import ensure_tenant
from service.db.candidate import record_submission
from service.db.session import session_scope
from service.settings import Settings
from tests.support.service import example, grant_injector


def record_assay(
    engine: sa.Engine,
    settings: Settings,
    plan: dict[str, Any],
    *,
    manifest: dict[str, Any] | None = None,
    system: str = "copperfin-returns",
    version: str = "1",
    source_revision: str = "direct",
    trials_per_shard: int = 10,
) -> uuid.UUID:
    """Record acme's candidate of `system` with its assay's shards and injector grant; the assay's
    id. The manifest defaults to the typed example."""
    core = parse_manifest(manifest or example("typed"))
    parsed = parse_plan(plan)
    with session_scope(engine) as session:
        recorded = record_submission(
            session,
            tenant_id=ensure_tenant(session, "acme").id,
            system_name=system,
            version=version,
            source_revision=source_revision,
            manifest=core,
            plan_document=parsed.model_dump(mode="json"),
            catalogue=parsed.resolve_catalogue().version,
            shards=plan_shards(core, parsed, trials_per_shard=trials_per_shard),
        )
        grant_injector(session, settings, recorded.assay, parsed)
    return recorded.assay.id


def seal(settings: Settings, assay_id: uuid.UUID) -> str | None:
    """What the shared pool's `assay.seal` does for an assay a tenant's worker stored: merge,
    decide and sign it with the service's key, which no tenant worker holds."""
    from worker.context import WorkerContext
    from worker.tasks import finalize

    shared = WorkerContext(settings.model_copy(update={"worker_tenant": None}))
    parsed = shared.assay(assay_id)
    assert parsed is not None
    return finalize(shared, parsed)
