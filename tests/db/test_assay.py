"""Shard results and the merged report are written once, whatever runs them twice."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from service.db.assay import (
    FaultResultValues,
    assay_inputs,
    ready_to_merge,
    record_report,
    store_shard_result,
)
from service.db.models import Assay
from tests.db.test_candidate import record

pytestmark = pytest.mark.integration

RESULT = {"index": 0, "trials": 20, "stopped": False, "tallies": {}}


def test_a_shard_result_is_stored_only_while_unset(session: Session) -> None:
    assay_id = record(session).assay.id
    inputs = assay_inputs(session, assay_id)
    assert inputs is not None
    assert store_shard_result(session, inputs, 0, RESULT, 20).written
    assert not store_shard_result(session, inputs, 0, RESULT, 20).written
    assay = session.get(Assay, assay_id)
    assert assay is not None
    session.refresh(assay)
    assert (assay.shards_done, assay.trials_done) == (1, 20)


def test_the_merge_waits_for_every_shard(session: Session) -> None:
    recorded = record(session)
    assay_id = recorded.assay.id
    inputs = assay_inputs(session, assay_id)
    assert inputs is not None
    for index in range(recorded.assay.shard_count - 1):
        store_shard_result(session, inputs, index, RESULT, 20)
    assert not ready_to_merge(session, assay_id)
    report = {"decision": "hold", "reasons": []}
    assert record_report(session, assay_id, decision="hold", report=report, faults=[]) is False
    store_shard_result(session, inputs, recorded.assay.shard_count - 1, RESULT, 10)
    session.expire_all()
    assert ready_to_merge(session, assay_id)


def test_the_report_is_recorded_once(session: Session) -> None:
    recorded = record(session)
    assay_id = recorded.assay.id
    inputs = assay_inputs(session, assay_id)
    assert inputs is not None
    for index in range(recorded.assay.shard_count):
        store_shard_result(session, inputs, index, RESULT, 15)
    rows = [FaultResultValues("subject_swap", "identity", 30, {"id": "subject_swap"}, [])]
    report = {"decision": "allow", "reasons": []}
    assert record_report(session, assay_id, decision="allow", report=report, faults=rows)
    assert not record_report(session, assay_id, decision="block", report=report, faults=rows)
    session.expire_all()
    assay = session.get(Assay, assay_id)
    assert assay is not None and assay.decision == "allow"
