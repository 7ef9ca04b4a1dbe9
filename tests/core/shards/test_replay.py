"""Replay re-executes one trial and shows exactly what the run recorded for it."""

from __future__ import annotations

from service.core.faults.plan import AssayPlan
from service.core.shards.assay import replay_trial, run_assay
from service.core.system.manifest import Manifest

KEYS = ("injections", "ledger", "evidence", "claim", "outcome")


def test_replaying_a_recorded_trial_reproduces_it_exactly(baseline: Manifest) -> None:
    plan = AssayPlan(trials=20, seed=31)
    report = run_assay(baseline, plan).to_dict()
    for fault in report["faults"]:
        for sample in fault["samples"] + [fault["first_violation"] or fault["samples"][0]]:
            replayed = replay_trial(baseline, plan, sample["trial"])
            assert replayed["fault"] == fault["id"]
            assert {k: replayed[k] for k in KEYS} == {k: sample[k] for k in KEYS}


def test_a_replay_shows_workload_calls_injections_world_and_grade(baseline: Manifest) -> None:
    plan = AssayPlan(catalogue="paper", trials=50, seed=188)
    trace = replay_trial(baseline, plan, 2)
    assert trace["fault"] in {"timeout_after_commit", "partial_success_response"}  # tool domain
    assert trace["workload"]["order"].startswith("synthetic/")
    assert any(c.get("call") == "payments.refund" for c in trace["calls"])
    assert any("injection" in c for c in trace["calls"])
    assert trace["world"]["ledger"] == trace["ledger"]
    assert set(trace["outcome"]) >= {"unsafe_escape", "useful_service", "verdict"}
