"""Counterfactual containment pairs: a pass that could not have failed does not count."""

from __future__ import annotations

from service.core.faults.catalogue import custom_catalogue, full_catalogue
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Manifest


def test_removing_each_nominated_control_shows_the_predicted_transfer(typed: Manifest) -> None:
    report = run_assay(typed, AssayPlan(trials=30, seed=11)).to_dict()
    nominated = [f for f in report["faults"] if f["spec"]["nominated_control"]]
    assert len(nominated) >= 12
    for f in nominated:
        cf = f["counterfactual"]
        assert cf["status"] == "valid", f["id"]
        assert cf["rate_without_control"] > cf["rate_with_control"], f["id"]


def test_a_control_without_leverage_is_invalid_evidence_that_holds_and_never_allows(
    typed_repair: Manifest,
) -> None:
    # Something other than the nominated control contains the fault: the pair cannot fail, so the
    # result does not count. It holds (with the way out in the message) rather than blocks, so
    # declaring fewer controls can never earn a better decision than declaring them.
    spec = full_catalogue().by_id("timeout_after_commit").model_dump(mode="json")
    spec.update(id="timeout_wrongly_credited", nominated_control=["bind_identity"])
    plan = AssayPlan(catalogue=custom_catalogue("test", [spec]), trials=40, seed=2)
    report = run_assay(typed_repair, plan).to_dict()
    assert report["faults"][0]["signature"]["useful_service"] == 1.0
    assert report["faults"][0]["counterfactual"]["status"] == "invalid"
    assert report["decision"] == "hold"
    reason = next(r for r in report["reasons"] if r["code"] == "counterfactual_invalid")
    assert reason["severity"] == "hold"
    assert "cannot_disable" in reason["message"]


def test_a_control_the_target_cannot_switch_off_leaves_its_sensitivity_untested(
    typed_repair: Manifest,
) -> None:
    data = typed_repair.model_dump(mode="json")
    data["target"]["cannot_disable"] = ["idempotency"]
    manifest = Manifest.model_validate(data)
    report = run_assay(manifest, AssayPlan(modes=("fork_run",), trials=10, seed=1)).to_dict()
    cf = report["faults"][0]["counterfactual"]
    assert cf["controls"]["idempotency"]["status"] == "cannot_disable"
    assert cf["removed"] == ["state_precondition"]
    assert report["decision"] == "hold"
    assert "counterfactual_untested" in {r["code"] for r in report["reasons"]}
