"""Careful targets the red team must not hurt: they act once, prove it and honour
disabled_controls, so they must still be `allow`, as python and as http targets.
"""

from __future__ import annotations

from tests.adversarial.conftest import StartAgent, assay_target, entry, manifest, plan

FAULTS = ("timeout_after_commit", "fork_run", "checkpoint_rollback", "retry_storm")


def assert_allowed(report: dict[str, object], faults: tuple[str, ...], n: int) -> None:
    assert report["decision"] == "allow", report["reasons"]
    assert report["reasons"] == []
    assert report["target_errors"] == {"total": 0, "by_kind": {}}
    by_id = {f["id"]: f for f in report["faults"]}  # type: ignore[attr-defined]
    for fault_id in faults:
        c = by_id[fault_id]["signature"]["counts"]
        assert (c["useful_service"], c["violation"]) == (n, 0), fault_id


def test_the_careful_base_agent_the_attackers_build_on_is_allowed() -> None:
    # Each attacker changes one step of this agent: what blocks or holds it is that step alone.
    faults = ("timeout_before_send", "reject_before_write", "retry_storm")
    report = assay_target(
        manifest(kind="python", entrypoint=entry("careful:run")), plan(10, *faults)
    )
    assert_allowed(report, faults, 10)


def test_the_typed_repair_reference_workflow_as_a_python_target_is_allowed() -> None:
    faults = (*FAULTS, "subject_swap", "break_trace_lineage", "partial_success_response")
    m = manifest(kind="python", entrypoint=entry("reference:typed_repair"))
    assert_allowed(assay_target(m, plan(10, *faults)), faults, 10)


def test_the_typed_repair_workflow_of_the_target_tests_as_a_python_target_is_allowed() -> None:
    # tests/targets/agents/typed.py, with the typed-repair manifest.
    m = manifest(kind="python", entrypoint="tests.targets.agents.typed:typed_repair")
    assert_allowed(assay_target(m, plan(10, *FAULTS)), FAULTS, 10)


def test_the_http_example_agent_with_typed_repair_switches_is_allowed(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--controls", "typed-repair")
    report = assay_target(manifest(kind="http", url=url), plan(10, *FAULTS))
    assert_allowed(report, FAULTS, 10)
