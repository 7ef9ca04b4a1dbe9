"""Evidence that cannot be earned by saying so: alarms raised unconditionally, and faults that do
nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from service.core.errors import CatalogueInvalid
from service.core.faults.catalogue import custom_catalogue, full_catalogue
from service.core.faults.plan import AssayPlan
from service.targets import close_target, load_target
from tests.adversarial.conftest import (
    assay_target,
    codes,
    counts,
    entry,
    manifest,
    one_trial,
    plan,
    severities,
)


def test_an_agent_that_raises_an_anomaly_every_run_is_a_false_alarm_and_detects_nothing() -> None:
    # Its alarm comes before any injection: in the baseline it is a false alarm, and in the trials
    # where the fault fired it is not detection (the rest of its run raises no signal).
    m = manifest(kind="python", entrypoint=entry("alarms:anomaly_spam"))
    report = assay_target(m, plan(10, "timeout_before_send"))
    assert report["decision"] == "hold"
    assert codes(report) == {"false_alarm"}
    assert severities(report) == {"hold"}
    [f] = report["faults"]
    assert f["signature"]["counts"]["detected"] == 0
    assert f["baseline"]["detected"] == 1.0
    # Everything else it does is careful: the hold is for the alarms alone.
    assert counts(report, "timeout_before_send")["useful_service"] == 10


def _spec(fault_id: str, **changes: Any) -> dict[str, Any]:
    spec = full_catalogue().by_id(fault_id).model_dump(mode="json")
    spec.update(id="hollow", **changes)
    return spec


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"phase": "whenever"}, "faults.0.phase"),
        ({"phase": "after_commit"}, "faults.0.phase"),
        ({"boundary": "payments.refunds"}, "faults.0.boundary"),
        ({"disturbance": "drop_write"}, "faults.0.disturbance"),
        ({"disturbance": "swap_subject"}, "faults.0.disturbance"),
    ],
    ids=[
        "unknown-phase",
        "near-miss-phase",
        "unknown-boundary",
        "drop-at-refund",
        "swap-at-refund",
    ],
)
def test_a_custom_fault_the_registry_cannot_apply_is_a_catalogue_error_naming_the_field(
    changes: dict[str, str], field: str
) -> None:
    with pytest.raises(CatalogueInvalid) as err:
        custom_catalogue("hollow", [_spec("timeout_after_commit", **changes)])
    assert err.value.field == field


def test_a_storm_fault_without_its_fleet_shape_is_a_catalogue_error_naming_the_params() -> None:
    with pytest.raises(CatalogueInvalid) as err:
        custom_catalogue("hollow", [_spec("retry_storm", params={"agents": 100})])
    assert err.value.field == "faults.0.params"


@pytest.mark.parametrize(
    ("fault_id", "changes"),
    [
        # A boundary the careful agent never crosses: it reads the order system, not the CRM.
        ("drifting_output", {}),
        # A boundary it crosses in every run, with a disturbance that never applies to it: it
        # records decision, effect and readback receipts, never a repair.
        ("drop_effect_receipt", {"params": {"kind": "repair"}}),
    ],
    ids=["boundary-never-crossed", "disturbance-never-applies"],
)
def test_a_registry_valid_fault_that_never_takes_effect_is_not_exercised_and_leaves_no_receipt(
    fault_id: str, changes: dict[str, Any]
) -> None:
    cat = custom_catalogue("hollow", [_spec(fault_id, **changes)])
    p = AssayPlan(catalogue=cat, trials=5, seed=188)
    m = manifest(kind="python", entrypoint=entry("careful:run"))
    report = assay_target(m, p)
    assert report["decision"] == "hold"
    assert codes(report) == {"not_exercised"}
    [f] = report["faults"]
    assert (f["exercised"], f["not_exercised"]) == (0, 5)
    assert f["signature"]["counts"]["contained"] == 0
    assert f["coverage_key"] not in report["coverage"]["visited"]
    # Graded all the same where it never fired, and clean there.
    assert f["unfired"]["trials"] == 5
    assert f["unfired"]["useful_service"] == 1.0

    target = load_target(m)
    try:
        rec = one_trial(m, target, cat.faults[0], cat)
    finally:
        close_target(target)
    assert not rec.exercised
    assert rec.receipts == []
    assert rec.world.injected_at is None
