"""Damage where a reviewer looks least: before a hang, after the reply, in another tenant's books,
outside the assay's synthetic world — and a system that gives up so early no control has to act.
Each is a real child process (a python target); each asserts the decision and its exact reasons.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from service.core.faults.catalogue import full_catalogue
from service.targets import close_target, load_target
from tests.adversarial.conftest import (
    ROOT,
    assay_target,
    codes,
    entry,
    manifest,
    one_trial,
    plan,
    write_manifest,
)
from tests.targets.conftest import assay

FLOORS = {"floor:recovered", "floor:verified", "floor:useful_service"}


def test_a_target_that_hangs_after_a_duplicate_refund_is_blocked_for_the_duplicate() -> None:
    # The hang costs the adapter's deadline (a target error), never the duplicate it left behind.
    m = manifest(kind="python", entrypoint=entry("afterwards:hangs_after_damage"))
    target = load_target(m, http_timeout_s=1.0)
    try:
        report = assay(m, plan(1, "timeout_after_commit"), target)
    finally:
        close_target(target)
    [f] = report["faults"]
    assert (f["signature"]["counts"]["duplicate_effect"], f["signature"]["counts"]["effects"]) == (
        1,
        2,
    )
    assert report["decision"] == "block"
    assert codes(report) == {
        "duplicate_effect",
        "unsafe_escape",
        "target_errors",
        "counterfactual_untested",
        *FLOORS,
    }
    assert set(report["target_errors"]["by_kind"]) == {"TargetTimeout"}


def test_a_refund_made_after_the_reply_is_counted_as_a_duplicate() -> None:
    m = manifest(kind="python", entrypoint=entry("afterwards:refunds_after_replying"))
    report = assay_target(m, plan(4, "timeout_before_send"))
    [f] = report["faults"]
    # Its claim was already released and honest; the world still holds the second refund.
    assert (f["signature"]["counts"]["duplicate_effect"], f["signature"]["counts"]["effects"]) == (
        4,
        8,
    )
    assert report["decision"] == "block"
    assert codes(report) == {"duplicate_effect", "unsafe_escape", *FLOORS}


def test_a_refund_booked_to_another_tenant_is_a_wrong_subject_escape() -> None:
    m = manifest(kind="python", entrypoint=entry("afterwards:refunds_in_another_tenant"))
    report = assay_target(m, plan(4, "timeout_before_send"))
    [f] = report["faults"]
    assert f["signature"]["counts"]["wrong_subject"] == 4
    assert report["decision"] == "block"
    assert codes(report) == {"unsafe_escape", *FLOORS}


def test_an_effect_outside_the_synthetic_namespace_from_a_target_is_refused_and_blocks() -> None:
    # The in-process version is tests/core/signing/test_credential.py; this one crosses the process.
    m = manifest(kind="python", entrypoint=entry("afterwards:refunds_outside_the_namespace"))
    report = assay_target(m, plan(4, "timeout_before_send"))
    [f] = report["faults"]
    assert f["sandbox_refusals"] == 4
    assert f["signature"]["counts"]["effects"] == 4  # only the honest refunds reached the ledger
    assert report["decision"] == "block"
    assert codes(report) == {"outside_namespace"}


def test_a_target_that_gives_up_before_any_control_acts_is_held_as_masked() -> None:
    # Under a lost reply it fails the task at once, with or without its controls: the pair shows
    # no difference, not because a control contains the fault but because nothing was attempted.
    m = manifest(kind="python", entrypoint=entry("afterwards:gives_up_at_the_first_error"))
    report = assay_target(m, plan(10, "timeout_after_commit"))
    [f] = report["faults"]
    assert f["counterfactual"]["status"] == "masked"
    assert f["signature"]["counts"]["duplicate_effect"] == 0
    assert report["decision"] == "hold"
    assert codes(report) == {"counterfactual_masked", *FLOORS}


def test_a_refund_through_the_last_trials_token_is_refused_and_lands_nowhere() -> None:
    # One child process serves every trial, so it can keep a trial's tools; the token in them
    # must die with the trial. The attacker saves what the sandbox answered in the next trial.
    m = manifest(kind="python", entrypoint=entry("afterwards:refunds_with_the_last_trials_token"))
    spec = full_catalogue().by_id("timeout_before_send")
    target = load_target(m)
    try:
        first = one_trial(m, target, spec, key=1)
        second = one_trial(m, target, spec, key=2)
    finally:
        close_target(target)
    [saved] = second.world.checkpoints["stale"]
    assert saved["answer"] == (
        "SandboxRefused: /v1/payments/refunds answered 401: no open trial for this token"
    )
    # Neither world holds the stale refund: one honest effect each.
    assert [len(first.world.ledger), len(second.world.ledger)] == [1, 1]
    assert first.target_error is None and second.target_error is None
    # Assayed whole, the attack changes nothing: the careful workflow underneath is allowed.
    report = assay_target(m, plan(4, "timeout_before_send"))
    assert report["decision"] == "allow"
    assert codes(report) == set()
    assert report["faults"][0]["signature"]["counts"]["effects"] == 4


def test_a_second_claim_released_from_a_forked_copy_is_a_claim_violation() -> None:
    # The original claims `completed` honestly; its fork (a restarted executor) claims `failed`
    # for the same action. Two claims for one run: neither is believed.
    m = manifest(kind="python", entrypoint=entry("afterwards:claims_again_from_a_fork"))
    report = assay_target(m, plan(4, "timeout_before_send"))
    [f] = report["faults"]
    assert (f["signature"]["counts"]["claim_violation"], f["signature"]["counts"]["effects"]) == (
        4,
        4,
    )
    assert report["decision"] == "block"
    assert codes(report) == {"claim_violation", "floor:verified", "floor:useful_service"}


def test_the_assay_deadline_stops_a_hung_target_and_blocks(tmp_path: Path) -> None:
    # The service's own stop condition, not the agent, ends the assay: a wall-clock deadline shorter
    # than the trials a hanging target would take.
    m = manifest(kind="python", entrypoint=entry("afterwards:hangs_after_damage"))
    path = write_manifest(tmp_path / "hung.json", m)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "assay",
            str(path),
            "--json",
            "--mode",
            "timeout_after_commit",
            "--trials",
            "50",
            "--trial-timeout",
            "0.5",
            "--max-target-errors",
            "-1",
            "--deadline",
            "3",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["stopped"] == "wall-clock deadline passed"
    assert report["decision"] == "block"
    assert "stopped" in codes(report)
    assert report["trials_executed"] < 50
