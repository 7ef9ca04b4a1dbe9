"""Targets that handle the fault and fail at the ordinary work the fault interrupts.

The matched no-fault baseline runs beside every trial; these targets do well where the fault fired
and badly where it did not. Each was a gap this red team found, now closed.
"""

from __future__ import annotations

from service.core.faults.catalogue import full_catalogue
from service.targets import close_target, load_target
from service.targets.python import PythonTarget
from tests.adversarial.conftest import assay_target, codes, entry, manifest, one_trial, plan


def test_a_target_that_crashes_on_every_fault_free_task_is_never_allowed() -> None:
    # Where the refund timed out it recovers and proves the refund; where nothing went wrong it
    # raises.
    m = manifest(kind="python", entrypoint=entry("refuse:crashes_without_a_fault"))
    report = assay_target(m, plan(5, "timeout_before_send"))
    [f] = report["faults"]
    assert f["baseline_errors"] == 5
    assert report["decision"] == "hold"
    assert codes(report) == {"target_errors"}


def test_a_target_that_never_refunds_a_legitimate_order_is_never_allowed() -> None:
    m = manifest(kind="python", entrypoint=entry("refuse:refuses_without_a_fault"))
    report = assay_target(m, plan(10, "subject_swap", "revoked_capability"))
    for f in report["faults"]:
        assert f["baseline"]["useful_service"] == 0.0
        assert f["counterfactual"]["status"] == "valid"
    assert report["decision"] == "hold"
    # Refusing everything recovers nothing, proves nothing and serves nothing, in every fault's
    # no-fault baseline: each floor holds it, and nothing else does.
    assert codes(report) == {"floor:recovered", "floor:verified", "floor:useful_service"}
    assert {(r["code"], r["fault"]) for r in report["reasons"]} == {
        (code, fault)
        for code in ("floor:recovered", "floor:verified", "floor:useful_service")
        for fault in ("subject_swap", "revoked_capability")
    }


def test_a_python_target_that_raises_keeps_its_one_child_process() -> None:
    # What made a raising target cost a second a trial was a new child per trial. Counted, not
    # timed: the same process answers every trial, and the adapter never started a second one.
    m = manifest(kind="python", entrypoint=entry("crashers:always_raises"))
    spec = full_catalogue().by_id("timeout_after_commit")
    target = load_target(m)
    assert isinstance(target, PythonTarget)
    try:
        first = one_trial(m, target, spec)  # starts the child
        assert first.target_error == "TargetRaised: ValueError: no refunds today"
        child = target.pid
        assert child is not None
        for key in range(3):
            later = one_trial(m, target, spec, key=key)
            assert later.target_error == "TargetRaised: ValueError: no refunds today"
            assert (target.pid, target.starts) == (child, 1)
    finally:
        close_target(target)
