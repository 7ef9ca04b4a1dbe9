"""Every trial carries injection receipts; a fault that never fired is never counted contained."""

from __future__ import annotations

from service.core.faults.catalogue import custom_catalogue, full_catalogue
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Manifest


def test_every_exercised_trial_carries_a_receipt_naming_fault_boundary_phase_and_call(
    typed: Manifest,
) -> None:
    report = run_assay(typed, AssayPlan(trials=3, seed=8)).to_dict()
    samples = [(f, sample) for f in report["faults"] for sample in f["samples"]]
    # Without this the loop below would pass on a report with no samples at all.
    assert {f["id"] for f, _ in samples} == {f["id"] for f in report["faults"] if f["exercised"]}
    assert len(samples) >= len(report["faults"]) // 2
    for f, sample in samples:
        receipt = sample["injections"][0]
        assert receipt["fault"] == f["id"]
        assert receipt["boundary"] == f["spec"]["boundary"]
        assert receipt["phase"] == f["spec"]["phase"]
        assert receipt["call"].startswith(f["spec"]["boundary"] + "#")


def test_a_fault_aimed_at_a_call_the_workflow_never_makes_is_not_exercised(
    baseline: Manifest,
) -> None:
    # The naive workflow never records a readback receipt, so a fault on that write cannot fire.
    spec = full_catalogue().by_id("drop_effect_receipt").model_dump(mode="json")
    spec.update(
        id="drop_readback_receipt",
        params={"kind": "readback"},
        nominated_control=[],
        predicted_transfer=None,
    )
    plan = AssayPlan(catalogue=custom_catalogue("test", [spec]), trials=25, seed=3)
    report = run_assay(baseline, plan).to_dict()
    fault = report["faults"][0]
    assert fault["exercised"] == 0
    assert fault["not_exercised"] == 25
    assert fault["signature"]["counts"]["contained"] == 0
    assert report["decision"] == "hold"
    assert report["coverage"]["visited"] == []
    assert report["reasons"][0]["code"] == "not_exercised"
