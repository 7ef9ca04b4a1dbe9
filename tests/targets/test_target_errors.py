"""A target that is down, slow or talks garbage: target errors, never containment, never allow."""

from __future__ import annotations

from typing import Any

import pytest

from service.core.shards.assay import plan_shards, run_shard
from service.core.system.manifest import Manifest
from service.core.trial.harness import Runtime, run_trial
from service.targets import HttpTarget
from tests.support.service import free_port
from tests.targets.conftest import BAD_AGENT, StartAgent, assay, example, fault, plan

MODE = "timeout_after_commit"


def first_trial_error(manifest: Manifest, target: HttpTarget) -> str | None:
    p = plan(1, MODE)
    rt = Runtime(manifest, p.resolve_catalogue(), target)
    spec = p.faults()[0]
    return run_trial(rt, spec, 1, 2).target_error


def assert_nothing_counted_as_contained(report: dict[str, Any]) -> None:
    entry = fault(report, MODE)
    assert entry["signature"]["counts"]["contained"] == 0
    assert entry["signature"]["counts"]["useful_service"] == 0
    assert report["decision"] != "allow"


def test_a_target_that_refuses_connections_is_a_target_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    manifest = example("typed", kind="http", url=url)
    with HttpTarget(url, timeout_s=2) as target:
        error = first_trial_error(manifest, target)
        report = assay(manifest, plan(5, MODE), target)
    assert error is not None and error.startswith("TargetUnreachable")
    assert_nothing_counted_as_contained(report)


def test_a_target_slower_than_its_budget_is_a_target_error(start_agent: StartAgent) -> None:
    url = start_agent("--mode", "slow", script=BAD_AGENT)
    manifest = example("typed", kind="http", url=url)
    with HttpTarget(url, timeout_s=0.2) as target:
        error = first_trial_error(manifest, target)
        report = assay(manifest, plan(2, MODE), target)
    assert error is not None and error.startswith("TargetTimeout")
    assert_nothing_counted_as_contained(report)


@pytest.mark.parametrize(
    ("mode", "error_type"),
    [
        ("garbage", "TargetProtocolError"),
        ("error", "TargetServerError"),
        ("bad-claim", "TargetProtocolError"),
        ("no-key", "TargetProtocolError"),
    ],
)
def test_a_target_that_answers_garbage_or_an_error_is_a_target_error(
    start_agent: StartAgent, mode: str, error_type: str
) -> None:
    url = start_agent("--mode", mode, script=BAD_AGENT)
    manifest = example("typed", kind="http", url=url)
    with HttpTarget(url, timeout_s=5) as target:
        error = first_trial_error(manifest, target)
        report = assay(manifest, plan(5, MODE), target)
    assert error is not None and error.startswith(error_type)
    assert_nothing_counted_as_contained(report)


def test_a_target_that_answers_without_releasing_a_claim_is_a_graded_claim_violation(
    start_agent: StartAgent,
) -> None:
    # Silence is not a target error to be waived: the run finished and owed exactly one claim.
    url = start_agent("--mode", "no-claim", script=BAD_AGENT)
    manifest = example("typed", kind="http", url=url)
    with HttpTarget(url, timeout_s=5) as target:
        error = first_trial_error(manifest, target)
        report = assay(manifest, plan(5, MODE), target)
    assert error is None
    assert_nothing_counted_as_contained(report)
    assert report["decision"] == "block"
    assert "claim_violation" in {r["code"] for r in report["reasons"]}


def test_the_assay_continues_past_target_errors_to_every_planned_trial() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    manifest = example("typed", kind="http", url=url)
    p = plan(7, MODE)
    with HttpTarget(url, timeout_s=2) as target:
        [shard] = plan_shards(manifest, p)
        result = run_shard(manifest, p, shard, target=target)
    assert result.trials == 7
    assert not result.stopped


def test_a_target_that_acts_then_answers_garbage_is_counted_as_a_target_error(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--mode", "late-garbage", script=BAD_AGENT)
    manifest = example("typed", kind="http", url=url)
    with HttpTarget(url, timeout_s=5) as target:
        error = first_trial_error(manifest, target)
        report = assay(manifest, plan(5, MODE), target)
    assert error is not None and error.startswith("TargetProtocolError")
    assert fault(report, MODE)["target_errors"] == 5
    assert report["decision"] != "allow"


def test_a_target_that_acts_then_answers_garbage_is_never_counted_as_contained(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--mode", "late-garbage", script=BAD_AGENT)
    manifest = example("typed", kind="http", url=url)
    with HttpTarget(url, timeout_s=5) as target:
        report = assay(manifest, plan(5, MODE), target)
    assert_nothing_counted_as_contained(report)


def test_target_errors_before_the_fault_fires_are_reported_in_the_signature() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    manifest = example("typed", kind="http", url=url)
    with HttpTarget(url, timeout_s=2) as target:
        report = assay(manifest, plan(5, MODE), target)
    assert fault(report, MODE)["target_errors"] == 5
