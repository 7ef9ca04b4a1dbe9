"""Recording and withdrawing submissions."""

from __future__ import annotations

import pytest
from sqlmodel import Session, func, select

from service.core.faults.plan import parse_plan
from service.core.shards.assay import plan_shards
from service.core.system.manifest import parse_manifest
from service.db import queries
from service.db.apikey import ensure_tenant
from service.db.candidate import Recorded, record_submission, withdraw_submission
from service.db.models import (
    Assay,
    AssayShard,
    Candidate,
    ComponentHash,
    Event,
    ManifestRow,
    System,
)
from tests.support.service import example

pytestmark = pytest.mark.integration


def record(session: Session, system: str = "copperfin-returns", trials: int = 30) -> Recorded:
    manifest = parse_manifest(example("typed"))
    plan = parse_plan({"trials": trials, "modes": ["subject_swap", "fork_run"]})
    recorded = record_submission(
        session,
        tenant_id=ensure_tenant(session, "acme").id,
        system_name=system,
        version="1.5.0",
        source_revision="abc",
        manifest=manifest,
        plan_document=plan.model_dump(mode="json"),
        catalogue="assaygate-full/1",
        shards=plan_shards(manifest, plan, trials_per_shard=20),
    )
    session.commit()
    return recorded


def count(session: Session, table: type) -> int:
    return int(session.exec(select(func.count()).select_from(table)).one())


def test_a_submission_records_its_shards_and_component_hashes(session: Session) -> None:
    recorded = record(session)
    assert recorded.assay.shard_count == 4
    assert recorded.assay.trials_planned == 60
    assert count(session, AssayShard) == 4
    hashes = queries.component_hashes(session, recorded.candidate.manifest_digest)
    assert set(hashes) >= {"tools", "policy", "retry"}


def test_candidates_that_change_nothing_share_one_manifest_row(session: Session) -> None:
    first = record(session)
    second = record(session)
    assert first.created_manifest and not second.created_manifest
    assert first.created_system and not second.created_system
    assert count(session, ManifestRow) == 1
    assert count(session, Candidate) == 2


def test_withdrawing_a_submission_leaves_no_row_behind(session: Session) -> None:
    recorded = record(session, system="brand-new")
    withdraw_submission(session, recorded)
    session.commit()
    for table in (System, ManifestRow, ComponentHash, Candidate, Assay, AssayShard, Event):
        assert count(session, table) == 0, table.__name__


def test_withdrawing_keeps_what_other_candidates_still_use(session: Session) -> None:
    kept = record(session)
    withdrawn = record(session)
    withdraw_submission(session, withdrawn)
    session.commit()
    assert count(session, Candidate) == 1
    assert session.get(System, kept.system.id) is not None
    assert session.get(ManifestRow, kept.candidate.manifest_digest) is not None
