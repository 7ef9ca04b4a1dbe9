"""Dossier assembly in the worker: exactly one signed version per finished assay, however many
workers finish it; evidence a custom catalogue makes invalid blocks the gate."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from service.app import gate, reviews
from service.core.faults.catalogue import custom_catalogue, full_catalogue
from service.core.signing.dossier import verify
from service.db import dossier as dossiers
from service.db.models import AssayShard, Dossier, Event, Hold, System
from service.keys import KeyRing
from service.settings import Settings
from tests.support.worker import record_assay
from worker.context import WorkerContext
from worker.tasks import execute_shard, finalize

pytestmark = pytest.mark.integration


def submit(engine: sa.Engine, settings: Settings, plan: dict[str, Any]) -> tuple[uuid.UUID, str]:
    system = f"worker-{uuid.uuid4().hex[:8]}"
    return record_assay(engine, settings, plan, system=system), system


def run_all(ctx: WorkerContext, engine: sa.Engine, assay_id: uuid.UUID) -> None:
    with Session(engine) as session:
        indices = session.exec(
            select(AssayShard.shard_index).where(AssayShard.assay_id == assay_id)
        ).all()
    for index in indices:
        execute_shard(ctx, assay_id, index, "w1")


def test_a_finished_assay_gets_exactly_one_signed_dossier_however_often_it_is_finalized(
    settings: Settings, engine: sa.Engine
) -> None:
    ctx = WorkerContext(settings)
    assay_id, _ = submit(engine, settings, {"trials": 20, "seed": 2, "modes": ["subject_swap"]})
    run_all(ctx, engine, assay_id)
    parsed = ctx.assay(assay_id)
    assert parsed is not None
    finalize(ctx, parsed)
    execute_shard(ctx, assay_id, 0, "w2")  # a redelivered last shard finds everything done
    with Session(engine) as session:
        rows = session.exec(select(Dossier).where(Dossier.assay_id == assay_id)).all()
        issued = session.exec(
            select(Event).where(Event.assay_id == assay_id, Event.kind == "dossier.issued")
        ).all()
    assert len(rows) == 1 and len(issued) == 1
    assert settings.keys_dir is not None
    keys = {k.keyid: k for k in KeyRing(settings.keys_dir).published()}
    envelope = json.loads(rows[0].envelope)
    assert verify(envelope, keys).ok


def test_invalid_counterfactual_evidence_holds_the_gate_and_is_never_allow(
    settings: Settings, engine: sa.Engine
) -> None:
    # The nominated control is one that has nothing to do with this fault: removing it changes
    # nothing, so a green result here could not have been red. It holds for a reviewer (the way out
    # is to declare what really contains the fault), never allows on its own.
    spec = full_catalogue().by_id("timeout_after_commit").model_dump(mode="json")
    spec["nominated_control"] = ["bind_identity"]
    catalogue = custom_catalogue("test-invalid-counterfactual/1", [spec])
    plan = {"trials": 20, "seed": 3, "catalogue": catalogue.model_dump(mode="json")}
    ctx = WorkerContext(settings)
    assay_id, system = submit(engine, settings, plan)
    run_all(ctx, engine, assay_id)
    with Session(engine) as session:
        row = session.exec(select(System).where(System.name == system)).one()
        candidate = dossiers.gate_candidate(session, row, "1")
        assert candidate is not None
        view = gate.answer(session, row, candidate).standing
        holds = session.exec(select(Hold).where(Hold.candidate_id == candidate.id)).all()
    assert view.decision == "hold"
    assert "counterfactual_invalid" in {r["code"] for r in view.reasons}
    assert view.dossier is not None and view.dossier.catalogue_version.startswith("test-invalid")
    assert len(holds) == 1 and not reviews.hard_reasons(holds[0])
