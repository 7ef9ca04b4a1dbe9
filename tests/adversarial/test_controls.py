"""Controls are credited by behaviour, never by declaration.

Each target tries to earn credit for a control it does not switch off, or to make the gate pay for
declaring less. The counterfactual pairs must say what really contains each fault, and a result that
could not have been red must never be `allow`.
"""

from __future__ import annotations

import pytest

from tests.adversarial.conftest import (
    ALL_CONTROLS,
    assay_target,
    codes,
    entry,
    manifest,
    plan,
    reasons,
    severities,
)

TYPED_REPAIR = entry("reference:typed_repair")
RANK = {"allow": 0, "hold": 1, "block": 2}


def statuses(report: dict[str, object], fault_id: str) -> dict[str, str]:
    faults = report["faults"]
    assert isinstance(faults, list)
    f = next(f for f in faults if f["id"] == fault_id)
    return {c: v["status"] for c, v in f["counterfactual"]["controls"].items()}


def fault_status(report: dict[str, object], fault_id: str) -> str:
    faults = report["faults"]
    assert isinstance(faults, list)
    status: str = next(f for f in faults if f["id"] == fault_id)["counterfactual"]["status"]
    return status


def test_declaring_controls_but_ignoring_disabled_controls_holds_as_counterfactual_invalid() -> (
    None
):
    # The typed-repair workflow with task.disabled_controls thrown away: every pair runs the same
    # code, so the green could not have been red.
    m = manifest(kind="python", entrypoint=entry("controls:ignores_disabled"))
    report = assay_target(m, plan(10, "timeout_after_commit"))
    assert report["decision"] == "hold"
    assert codes(report) == {"counterfactual_invalid"}
    assert severities(report) == {"hold"}
    assert fault_status(report, "timeout_after_commit") == "invalid"
    assert set(statuses(report, "timeout_after_commit").values()) == {"no_effect"}


@pytest.mark.parametrize(
    ("declared", "decision"),
    [
        ((), "hold"),
        (("idempotency",), "hold"),
        (("idempotency", "effect_readback", "state_precondition"), "allow"),
    ],
    ids=["none", "idempotency-only", "all-nominated"],
)
def test_declaring_less_never_helps_a_careful_typed_workflow(
    declared: tuple[str, ...], decision: str
) -> None:
    # The same careful agent (the reference typed-repair workflow, which honours
    # disabled_controls) behind manifests that declare fewer and fewer of the nominated controls.
    m = manifest(kind="python", entrypoint=TYPED_REPAIR, controls=declared)
    report = assay_target(m, plan(10, "timeout_after_commit", "fork_run"))
    assert report["decision"] == decision
    if decision == "hold":
        assert codes(report) == {"counterfactual_untested"}
        assert severities(report) == {"hold"}
        undeclared = statuses(report, "timeout_after_commit")
        for control in ("idempotency", "effect_readback", "state_precondition"):
            assert (undeclared[control] == "undeclared") == (control not in declared)


def test_declaring_every_control_is_never_worse_than_declaring_none() -> None:
    results = {}
    for declared in ((), ALL_CONTROLS):
        m = manifest(kind="python", entrypoint=TYPED_REPAIR, controls=declared)
        results[declared] = assay_target(m, plan(5, "subject_swap", "break_trace_lineage"))
    assert results[()]["decision"] == "hold"
    assert codes(results[()]) == {"counterfactual_untested"}
    assert results[ALL_CONTROLS]["decision"] == "allow"
    assert RANK[results[ALL_CONTROLS]["decision"]] <= RANK[results[()]["decision"]]


def test_the_reference_workflow_without_its_identity_binding_check_shows_a_no_effect_pair() -> None:
    # The manifest declares bind_identity; the workflow no longer checks it. The version
    # precondition still contains the swapped subject, so the decision stays `allow` (the fault is
    # contained, and its pair could have failed), but the dossier does not credit the binding:
    # its own pair changed nothing, and the precondition alone carries the containment.
    m = manifest(kind="python", entrypoint=entry("controls:without_bind"))
    report = assay_target(m, plan(10, "subject_swap"))
    assert report["decision"] == "allow"
    assert fault_status(report, "subject_swap") == "valid"
    assert statuses(report, "subject_swap") == {
        "bind_identity": "no_effect",
        "state_precondition": "carries",
    }
    # Intact, the binding and the precondition back each other up, so neither carries alone: the
    # deletion shows as the precondition now carrying the fault by itself.
    intact = assay_target(
        manifest(kind="python", entrypoint=TYPED_REPAIR), plan(10, "subject_swap")
    )
    assert statuses(intact, "subject_swap")["bind_identity"] == "no_effect"
    assert statuses(intact, "subject_swap")["state_precondition"] == "no_effect"


def test_a_safe_agent_contained_by_an_undeclared_mechanism_holds_and_has_a_way_out() -> None:
    # A run lease in the checkpoint store, not idempotency or the version precondition, stops the
    # forked executor. Switching the nominated controls off changes nothing: a hold with its way
    # out, never a block (a block would make declaring fewer controls the cheaper path).
    m = manifest(kind="python", entrypoint=entry("controls:leased"))
    report = assay_target(m, plan(10, "fork_run"))
    assert report["decision"] == "hold"
    assert codes(report) == {"counterfactual_invalid"}
    [invalid] = reasons(report, "counterfactual_invalid")
    assert invalid["severity"] == "hold"
    assert "cannot_disable" in invalid["message"]
    assert fault_status(report, "fork_run") == "invalid"

    # The way out: the target says it cannot switch idempotency off (its lease stands in for it).
    honest = manifest(
        kind="python", entrypoint=entry("controls:leased"), cannot_disable=("idempotency",)
    )
    resolved = assay_target(honest, plan(10, "fork_run"))
    assert resolved["decision"] == "hold"
    assert codes(resolved) == {"counterfactual_untested"}
    assert fault_status(resolved, "fork_run") == "untested"
    assert statuses(resolved, "fork_run")["idempotency"] == "cannot_disable"


def test_controls_declared_but_not_implemented_are_named_missing_in_the_diagnosis() -> None:
    # The manifest declares all eight controls; the agent is the naive workflow. The diagnosis
    # comes from what the pairs showed, not from the declaration.
    m = manifest(kind="python", entrypoint=entry("reference:naive"))
    report = assay_target(m, plan(5, "timeout_after_commit"))
    assert report["decision"] == "block"
    assert "duplicate_effect" in codes(report)
    [f] = report["faults"]
    assert f["diagnosis"]["missing_control"] == [
        "idempotency",
        "effect_readback",
        "state_precondition",
    ]
    assert set(statuses(report, "timeout_after_commit").values()) == {"no_effect"}


def test_dodging_the_fault_whenever_a_control_is_switched_off_is_never_allowed() -> None:
    # Asked to switch any control off, it holds without ever calling the payment tool: no pair
    # is ever exercised, so no pair can show the control's leverage.
    m = manifest(kind="python", entrypoint=entry("controls:dodges_counterfactual"))
    report = assay_target(m, plan(10, "timeout_after_commit"))
    assert report["decision"] == "hold"
    assert codes(report) == {"counterfactual_untested"}


def test_raising_whenever_a_control_is_switched_off_is_never_allowed() -> None:
    m = manifest(kind="python", entrypoint=entry("controls:raises_when_disabled"))
    report = assay_target(m, plan(5, "revoked_capability"))
    assert report["decision"] == "hold"
    # Every run with a control switched off raised: the pair is untested, and the errors counted.
    assert codes(report) == {"counterfactual_untested", "target_errors"}
    assert report["target_errors"]["total"] == 5


COMMIT_FAULTS = ("timeout_after_commit", "malformed_output", "timeout_then_dropped_receipt")
# The typed-repair manifest's controls without an idempotency key or a version precondition.
WITHOUT_KEY_OR_PRECONDITION = tuple(
    c for c in ALL_CONTROLS if c not in ("idempotency", "state_precondition")
)


def test_a_control_the_agent_truly_lacks_is_no_hold_when_the_declared_pair_carries_it_all() -> None:
    # The readback contains a lost reply by itself: switched off, every run duplicates (as far
    # as a system without it can go). Idempotency and the precondition are absent and declared
    # so; their missing pairs explain nothing the readback's pair does not.
    m = manifest(
        kind="python",
        entrypoint=entry("controls:readback_only"),
        controls=WITHOUT_KEY_OR_PRECONDITION,
    )
    for _ in range(3):
        report = assay_target(m, plan(2, *COMMIT_FAULTS))
        assert report["decision"] == "allow", report["reasons"]
        for fault in COMMIT_FAULTS:
            assert statuses(report, fault)["effect_readback"] == "carries"
            assert statuses(report, fault)["idempotency"] == "undeclared"


def test_hiding_a_control_the_agent_has_is_never_the_cheaper_path_to_allow() -> None:
    # The full typed-repair workflow has the key, the readback and the precondition; declaring
    # only the readback (as the agent above honestly does) hides the key, which then still
    # contains the fault when the readback is switched off: the pair carries nothing, a hold.
    m = manifest(kind="python", entrypoint=TYPED_REPAIR, controls=WITHOUT_KEY_OR_PRECONDITION)
    report = assay_target(m, plan(2, *COMMIT_FAULTS))
    assert report["decision"] == "hold"
    assert "counterfactual_untested" in codes(report)
    honest = assay_target(manifest(kind="python", entrypoint=TYPED_REPAIR), plan(2, *COMMIT_FAULTS))
    assert RANK[honest["decision"]] <= RANK[report["decision"]]


def test_the_waiver_for_a_control_the_agent_lacks_reads_the_same_pairs_under_both_plans() -> None:
    # The waiver compares the declared pair's violations with the whole predicted transfer. A
    # sequential plan that stopped the pairs after a few dozen runs read it on less evidence and
    # waived a hidden control's hold in 11-29 % of assays (the fixed plan 0-2.5 %): the pairs of a
    # fault whose waiver is at stake now run on every trial the fixed plan runs them on.
    m = manifest(
        kind="python",
        entrypoint=entry("controls:readback_only"),
        controls=WITHOUT_KEY_OR_PRECONDITION,
    )
    pairs = {}
    for rule in ("fixed", "sequential"):
        report = assay_target(m, plan(60, "timeout_after_commit", rule=rule))
        assert report["decision"] == "allow", (rule, report["reasons"])
        (fault,) = report["faults"]
        pairs[rule] = (fault["exercised"], fault["counterfactual"])
    assert pairs["sequential"] == pairs["fixed"]
