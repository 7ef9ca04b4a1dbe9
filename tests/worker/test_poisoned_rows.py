"""One bad row never stops a reconciler's round, and whatever a target returns ends as a stored,
signed, verifiable dossier or as a failed assay with a reason. Real PostgreSQL and Redis, the
worker's own store and merge steps, and the reconciler's real round."""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from sqlmodel import Session, col, select

from service.core.faults.plan import parse_plan
from service.core.shards.assay import ShardResult, ShardSpec, run_shard
from service.core.signing.dossier import Signer, verify
from service.core.system.manifest import parse_manifest
from service.db.assay import assay_inputs, store_shard_result
from service.db.models import Assay, AssayShard, AssayStatus, Dossier, Hold
from service.db.session import session_scope
from service.keys import KeyRing
from service.settings import Settings
from tests.support.hostile import hostile_value
from tests.support.service import example
from tests.support.worker import record_assay
from tests.web.seed import seed_waiver
from worker.context import WorkerContext
from worker.reconciler import Reconciler
from worker.steps import store_result
from worker.tasks import finalize

pytestmark = pytest.mark.integration

PLAN = {"trials": 2, "seed": 4, "modes": ["timeout_before_send"]}
POISON = "\ud800"


def signer_of(settings: Settings) -> Signer:
    assert settings.keys_dir is not None
    return KeyRing(settings.keys_dir).load_or_create()


def lapsed_waiver(engine: sa.Engine, signer: Signer, tenant: str) -> uuid.UUID:
    """A held candidate of `tenant` whose waiver lapsed a second ago; its hold's id."""
    lapsed_at = datetime.now(UTC) - timedelta(seconds=1)
    with session_scope(engine) as session:
        return seed_waiver(session, signer, expires_at=lapsed_at, tenant=tenant).id


def poisoned_sample(result: dict[str, Any], value: Any) -> dict[str, Any]:
    """The shard result with `value` in its first sample, where a target's words are kept."""
    poisoned = copy.deepcopy(result)
    tally = next(iter(poisoned["tallies"].values()))
    tally["samples"] = [{**(tally["samples"] or [{}])[0], "claim": {"reason": value}}]
    return poisoned


def clean_result(engine: sa.Engine, settings: Settings) -> dict[str, Any]:
    assay_id = record_assay(engine, settings, PLAN, system=f"clean-{uuid.uuid4().hex[:8]}")
    with Session(engine) as session:
        spec = session.exec(select(AssayShard.spec).where(AssayShard.assay_id == assay_id)).one()
    manifest = parse_manifest(example("typed"))
    return run_shard(manifest, parse_plan(PLAN), ShardSpec.from_dict(spec)).to_dict()


def test_a_row_that_cannot_be_signed_is_skipped_and_every_other_tenants_work_is_done(
    settings: Settings, engine: sa.Engine
) -> None:
    signer = signer_of(settings)
    # Rows written before text was made valid where it enters: a stored shard result and a
    # hold's reasons, each holding half a surrogate pair (PostgreSQL's json keeps the escape).
    result = clean_result(engine, settings)
    poisoned_assay = record_assay(engine, settings, PLAN, system=f"poison-{uuid.uuid4().hex[:8]}")
    with session_scope(engine) as session:
        inputs = assay_inputs(session, poisoned_assay)
        assert inputs is not None
        store_shard_result(session, inputs, 0, poisoned_sample(result, POISON), 2)
    poisoned_hold = lapsed_waiver(engine, signer, "poisoner")
    with session_scope(engine) as session:
        hold = session.get(Hold, poisoned_hold)
        assert hold is not None
        hold.reasons = [{**hold.reasons[0], "message": POISON}]
        session.add(hold)
    neighbours_hold = lapsed_waiver(engine, signer, "neighbour")

    time.sleep(settings.reconcile_interval_s + 0.1)  # the last store settles before a merge
    reconciler = Reconciler(settings, "isolating")
    try:
        done = reconciler.run_once()
    finally:
        reconciler.client.close()

    with Session(engine) as session:
        neighbour = session.get(Hold, neighbours_hold)
        poisoner = session.get(Hold, poisoned_hold)
        assay = session.get(Assay, poisoned_assay)
        assert neighbour is not None and poisoner is not None and assay is not None
        latest = session.exec(
            select(Dossier)
            .where(Dossier.candidate_id == neighbour.candidate_id)
            .order_by(col(Dossier.version).desc())
        ).first()
    # The neighbour's lapse is signed in the round that met both bad rows.
    assert done.expired >= 1
    assert neighbour.status == "open" and latest is not None and latest.change == "waiver expired"
    # The unsignable hold is left as it was (logged), not half-reopened.
    assert poisoner.status == "waived"
    # The poisoned assay ends, failed with a reason, instead of coming back every round.
    assert assay.status == AssayStatus.FAILED, assay.status
    assert assay.report is not None and "cannot be stored or signed" in assay.report["error"]


@pytest.fixture(scope="module")
def a_clean_result(settings: Settings, engine: sa.Engine) -> dict[str, Any]:
    return clean_result(engine, settings)


@pytest.fixture(scope="module")
def ctx(settings: Settings) -> Iterator[WorkerContext]:
    context = WorkerContext(settings)
    yield context
    context.forget_engine()


def stored_report(engine: sa.Engine, assay_id: uuid.UUID) -> str:
    """The assay's report as PostgreSQL holds it (JSON text)."""
    with engine.connect() as connection:
        text = connection.execute(
            sa.text("select report::text from assay where id = :id"), {"id": assay_id}
        ).scalar_one()
    return str(text)


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=hostile_value)
def test_whatever_a_target_returns_ends_signed_and_verifiable_or_failed_with_a_reason(
    settings: Settings,
    engine: sa.Engine,
    ctx: WorkerContext,
    a_clean_result: dict[str, Any],
    value: Any,
) -> None:
    assay_id = record_assay(engine, settings, PLAN, system=f"fuzz-{uuid.uuid4().hex[:8]}")
    parsed = ctx.assay(assay_id)
    assert parsed is not None
    result = ShardResult.from_dict(poisoned_sample(a_clean_result, value))
    ids = {"assay_id": str(assay_id)}
    stored = store_result(ctx, parsed, result, ids)
    if stored.complete:
        finalize(ctx, parsed)
    with Session(engine) as session:
        assay = session.get(Assay, assay_id)
        assert assay is not None
        dossier = session.exec(select(Dossier).where(Dossier.assay_id == assay_id)).first()
    if assay.status == AssayStatus.FAILED:
        assert assay.report is not None and "cannot be stored or signed" in assay.report["error"]
        assert dossier is None
        return
    assert assay.status == AssayStatus.DONE, assay.status
    assert dossier is not None
    assert settings.keys_dir is not None
    keys = {k.keyid: k for k in KeyRing(settings.keys_dir).published()}
    assert verify(json.loads(dossier.envelope), keys).ok
    # Stored as valid text: no half surrogate pair or NUL reached the database.
    for text in strings(json.loads(stored_report(engine, assay_id))):
        assert "\x00" not in text
        text.encode("utf-8")
