"""The typed report reads back exactly the JSON it writes, for reports the assay really produces."""

from __future__ import annotations

import json

import pytest

from service.core.decision.gate import Decision
from service.core.decision.report import AssayReport
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Manifest
from tests.core.conftest import load_example

PLANS = {
    "full-catalogue": AssayPlan(trials=12, seed=5),
    "paper-mode": AssayPlan(catalogue="paper", trials=300, seed=188),
    "intervention-only": AssayPlan(trials=6, seed=3, matched_baseline=False, counterfactuals=False),
}


@pytest.mark.parametrize("profile", ["typed", "baseline", "refuse-all"])
@pytest.mark.parametrize("plan", list(PLANS), ids=list(PLANS))
def test_a_stored_report_reads_back_to_the_same_report_and_the_same_json(
    profile: str, plan: str
) -> None:
    report = run_assay(load_example(profile), PLANS[plan])
    stored = json.loads(json.dumps(report.to_dict()))
    again = AssayReport.from_dict(stored)
    assert again == report
    assert json.dumps(again.to_dict()) == json.dumps(report.to_dict())


def test_the_report_carries_a_decision_not_a_string(typed: Manifest) -> None:
    report = run_assay(typed, PLANS["full-catalogue"])
    assert isinstance(report.decision, Decision)
    assert report.to_dict()["decision"] == report.decision.value


def test_a_storm_fault_and_its_pairs_survive_the_round_trip(typed: Manifest) -> None:
    report = run_assay(typed, PLANS["full-catalogue"])
    stored = AssayReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert any(f.storm is not None for f in stored.faults)
    assert any(f.counterfactual.pair is not None for f in stored.faults)
    assert stored.faults == report.faults
