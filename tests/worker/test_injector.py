"""Injector identities, stop conditions and aborts, on a real database, Redis and workers."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlmodel import Session, col, select

from service.core.signing.credential import InjectorScope, mint
from service.core.signing.dossier import Signer
from service.db.apikey import ensure_tenant
from service.db.models import Assay, AssayShard, AssayStatus, Event
from service.db.session import session_scope
from service.db.tenant import set_code_allowed
from service.settings import Settings
from tests.support.service import example, tenant_code
from tests.support.worker import record_assay, seal
from worker.context import WorkerContext
from worker.tasks import execute_shard

pytestmark = pytest.mark.integration


def submit(
    engine: sa.Engine, settings: Settings, manifest: dict[str, Any] | None = None, **plan: Any
) -> uuid.UUID:
    stop = plan.pop("stop", {})
    return record_assay(
        engine,
        settings,
        {"trials": 20, "seed": 5, **plan, "stop": stop},
        manifest=manifest,
        version="9.9.9",
        source_revision="test",
    )


def run_all(ctx: WorkerContext, engine: sa.Engine, assay_id: uuid.UUID) -> Assay:
    with Session(engine) as session:
        count = session.get(Assay, assay_id).shard_count  # type: ignore[union-attr]
    for index in range(count):
        execute_shard(ctx, assay_id, index, "w1")
    if ctx.settings.worker_tenant:
        seal(ctx.settings, assay_id)  # a tenant's worker never signs: the shared pool does
    with Session(engine) as session:
        row = session.get(Assay, assay_id)
        assert row is not None
        return row


def events(engine: sa.Engine, assay_id: uuid.UUID, kind: str) -> list[Event]:
    with Session(engine) as session:
        return list(
            session.exec(select(Event).where(Event.assay_id == assay_id, Event.kind == kind))
        )


def set_credential(engine: sa.Engine, assay_id: uuid.UUID, token: str) -> None:
    with session_scope(engine) as session:
        session.execute(sa.update(Assay).where(col(Assay.id) == assay_id).values(credential=token))


def _claims(assay_id: uuid.UUID, **over: Any) -> InjectorScope:
    now = time.time()
    base: dict[str, Any] = dict(
        tenant="copperfin-returns",
        candidate="c",
        assay=str(assay_id),
        modes=("timeout_after_commit",),
        namespace="synthetic/",
        max_effects=1000,
        not_before=now - 5,
        expires=now + 600,
    )
    base.update(over)
    return InjectorScope(**base)


def test_every_submission_mints_a_scoped_expiring_credential(
    engine: sa.Engine, settings: Settings
) -> None:
    assay_id = submit(engine, settings, modes=["timeout_then_dropped_receipt"])
    [minted] = events(engine, assay_id, "credential.minted")
    assert minted.data["modes"] == ["drop_recovery_receipt", "timeout_then_dropped_receipt"]
    assert minted.data["namespace"] == "synthetic/"
    assert minted.data["expires"] > time.time()


@pytest.mark.parametrize("case", ["forged", "tampered", "expired", "other-assay"])
def test_a_bad_credential_is_refused_before_any_injection_with_its_reason(
    engine: sa.Engine, settings: Settings, case: str
) -> None:
    ctx = WorkerContext(settings)
    assay_id = submit(engine, settings, modes=["timeout_after_commit"])
    with Session(engine) as session:
        good = session.get(Assay, assay_id).credential  # type: ignore[union-attr]
    assert good is not None

    service_key = settings.injector_ring().load_or_create()
    token = {
        "forged": lambda: mint(_claims(assay_id), Signer(Ed25519PrivateKey.generate())),
        "tampered": lambda: good.split(".")[0][:-4] + "AAAA." + good.split(".")[1],
        "expired": lambda: mint(
            _claims(assay_id, not_before=time.time() - 100, expires=time.time() - 1), service_key
        ),
        "other-assay": lambda: mint(_claims(uuid.uuid4()), service_key),
    }[case]()
    set_credential(engine, assay_id, token)
    row = run_all(ctx, engine, assay_id)
    assert row.status == AssayStatus.STOPPED and row.decision == "block"
    assert row.stop_reason is not None and row.stop_reason.startswith("injector credential refused")
    assert row.trials_done == 0  # nothing was injected
    [refused] = events(engine, assay_id, "credential.refused")
    assert refused.data["reason"]
    assert row.report is not None and row.report["stopped"] == row.stop_reason


def test_a_low_effect_cap_stops_the_assay_and_the_rest_never_runs(
    engine: sa.Engine, settings: Settings
) -> None:
    ctx = WorkerContext(settings)
    assay_id = submit(engine, settings, trials=40, families=["tool"], stop={"max_effects": 5})
    row = run_all(ctx, engine, assay_id)
    assert row.status == AssayStatus.STOPPED and row.decision == "block"
    assert row.stop_reason is not None and row.stop_reason.startswith("effects above the cap")
    assert row.trials_done < row.trials_planned
    with Session(engine) as session:
        shards = list(session.exec(select(AssayShard).where(AssayShard.assay_id == assay_id)))
    assert sum(1 for s in shards if s.trials == 0) >= len(shards) - 1
    assert any(r["code"] == "stopped" for r in row.reasons or [])
    assert events(engine, assay_id, "assay.stopped")


def test_a_target_acting_outside_the_synthetic_namespace_is_refused_counted_reported(
    engine: sa.Engine, settings: Settings
) -> None:
    # A python target is acme's code: allowed, and run on acme's own worker (worker.code).
    ctx = WorkerContext(
        settings.model_copy(update={"worker_tenant": "acme", "tenant_code_dir": tenant_code()})
    )
    manifest = {
        **example("typed"),
        "target": {"kind": "python", "entrypoint": "tests.worker.agents.rogue:agent"},
    }
    with session_scope(engine) as session:
        set_code_allowed(session, ensure_tenant(session, "acme"), True)
    assay_id = submit(engine, settings, manifest, modes=["timeout_before_send"], trials=10)
    row = run_all(ctx, engine, assay_id)
    assert row.decision == "block"
    assert "outside_namespace" in {r["code"] for r in row.reasons or []}
    assert sum(e.data["count"] for e in events(engine, assay_id, "sandbox.refused")) >= 10
