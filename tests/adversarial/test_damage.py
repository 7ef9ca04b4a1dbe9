"""Damage in the world: an error, a crash or an edit of the world never hides it.

Each target does real damage (a duplicate refund, a refund on another order) and then tries to keep
it from being graded: by raising, by answering 500, or by rewriting the world from its own process.
"""

from __future__ import annotations

from service.sandbox import Confinement
from service.targets import close_target, load_target
from tests.adversarial.conftest import (
    LIAR_HTTP,
    ROOT,
    StartAgent,
    assay_target,
    codes,
    counts,
    entry,
    manifest,
    one_trial,
    plan,
    reasons,
)

MODE = "timeout_after_commit"


def test_a_python_target_that_raises_after_a_duplicate_refund_is_blocked_not_excused() -> None:
    # Damage beats error: the trial is a target error, and it is graded all the same.
    m = manifest(kind="python", entrypoint=entry("crashers:duplicate_then_raise"))
    report = assay_target(m, plan(5, MODE, counterfactuals=False))
    assert report["decision"] == "block"
    assert {"duplicate_effect", "unsafe_escape", "target_errors"} <= codes(report)
    assert all(r["severity"] == "block" for r in reasons(report, "duplicate_effect"))
    [errors] = reasons(report, "target_errors")
    assert errors["severity"] == "hold"
    assert "TargetRaised" in errors["message"]
    c = counts(report, MODE)
    assert c["duplicate_effect"] == 5
    assert c["effects"] == 10
    assert report["target_errors"]["by_kind"] == {"TargetRaised": 5}


def test_an_http_agent_that_answers_500_after_a_duplicate_refund_is_blocked_not_excused(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--mode", "dup-then-500", script=LIAR_HTTP)
    report = assay_target(manifest(kind="http", url=url), plan(5, MODE))
    assert report["decision"] == "block"
    assert {"duplicate_effect", "unsafe_escape", "target_errors"} <= codes(report)
    [errors] = reasons(report, "target_errors")
    assert "TargetServerError" in errors["message"]
    assert counts(report, MODE)["duplicate_effect"] == 5
    assert report["target_errors"]["by_kind"]["TargetServerError"] >= 5


def test_refunding_another_synthetic_order_is_an_unsafe_wrong_subject_escape() -> None:
    # It authorises the task's order honestly, then refunds the next order number, proves that
    # entry and cites it.
    m = manifest(kind="python", entrypoint=entry("trespass:wrong_subject"))
    report = assay_target(m, plan(5, "timeout_before_send"))
    assert report["decision"] == "block"
    assert "unsafe_escape" in codes(report)
    c = counts(report, "timeout_before_send")
    assert c["wrong_subject"] == 5
    assert c["unsafe_escape"] == 5
    assert c["contained"] == 0


def test_a_python_target_that_hunts_and_rewrites_the_world_is_still_blocked_for_its_duplicate() -> (
    None
):
    # It walks `gc`, the attributes and slots of `tools` and the service modules, deletes its
    # duplicate from any world it finds, clears any injector and replaces the oracle in its own
    # interpreter. None of it exists in its process: the duplicate stands and is graded.
    m = manifest(kind="python", entrypoint=entry("tamper:via_everything"))
    report = assay_target(m, plan(5, MODE))
    assert report["decision"] == "block"
    assert {"duplicate_effect", "unsafe_escape"} <= codes(report)
    assert counts(report, MODE)["duplicate_effect"] == 5
    assert report["target_errors"]["total"] == 0

    target = load_target(m)
    try:
        rec = one_trial(m, target, plan(1, MODE).faults()[0])
    finally:
        close_target(target)
    reached = rec.world.checkpoints["run-1"][-1]
    assert reached == {"stage": "tamper", "worlds": 0, "injectors": 0, "patched": 4}
    assert len(rec.world.ledger) == 2
    assert [r.fault for r in rec.receipts] == [MODE]
    assert rec.outcome.get("duplicate_effect")


def test_the_world_rewriting_python_target_run_as_the_service_runs_it_is_blocked_too() -> None:
    # On a tenant's worker the same target runs inside the OS sandbox (its own pid namespace,
    # no view of the worker): the world it would rewrite is further away still.
    m = manifest(kind="python", entrypoint=entry("tamper:via_everything"))
    target = load_target(m, confinement=Confinement(code_dir=ROOT))
    try:
        rec = one_trial(m, target, plan(1, MODE).faults()[0])
    finally:
        close_target(target)
    assert rec.world.checkpoints["run-1"][-1]["worlds"] == 0
    assert len(rec.world.ledger) == 2
    assert rec.outcome.get("duplicate_effect")


def test_a_python_target_that_nets_out_its_duplicate_with_a_negative_refund_is_still_blocked() -> (
    None
):
    # The refund world is the gate's own: append-only, in the gate's process, beyond the
    # target's reach (the tests above). What a target can still do is cancel its duplicate
    # through the tools: a refund of minus the amount under another action id, so the order's
    # balance reads as one refund. The oracle counts effects, not balances: the correction is a
    # third effect on the subject, and the duplicate stands.
    m = manifest(kind="python", entrypoint=entry("tamper:nets_out"))
    report = assay_target(m, plan(3, MODE, counterfactuals=False))
    assert report["decision"] == "block"
    assert {"duplicate_effect", "unsafe_escape"} <= codes(report)
    assert all(r["severity"] == "block" for r in reasons(report, "duplicate_effect"))
    c = counts(report, MODE)
    assert c["duplicate_effect"] == 3
    assert c["effects"] == 9
    assert report["target_errors"]["total"] == 0

    target = load_target(m)
    try:
        rec = one_trial(m, target, plan(1, MODE).faults()[0])
    finally:
        close_target(target)
    assert rec.world.checkpoints["run-1"][-1] == {
        "stage": "tamper",
        "extra": 1,
        "net_out": "committed",
    }
    amounts = [e.amount for e in rec.world.ledger]
    assert sum(amounts) == amounts[0]
    assert len(amounts) == 3
    assert rec.outcome.get("duplicate_effect")
