"""The retry storm is graded from the retries a target makes, never from the policy it declares.

Every manifest here declares full jitter and a shared retry budget (the typed-repair profile); the
targets do otherwise.
"""

from __future__ import annotations

from typing import Any

from tests.adversarial.conftest import (
    StartAgent,
    assay_target,
    codes,
    entry,
    manifest,
    plan,
    severities,
)

MODE = "retry_storm"


def declares_full_jitter_and_a_budget(m: Any) -> None:
    assert m.retry.jitter == "full"
    assert m.retry.budget is not None


def assert_service_lost(report: dict[str, Any], n: int) -> None:
    assert report["decision"] == "hold"
    assert {"floor:useful_service", "floor:recovered"} <= codes(report)
    assert severities(report) == {"hold"}
    [f] = report["faults"]
    assert f["storm"]["observed"]["admitted"] == 0
    assert f["signature"]["counts"]["useful_service"] == 0
    assert f["signature"]["counts"]["service_loss"] == n


def test_a_zero_backoff_python_agent_declaring_full_jitter_and_a_budget_loses_service() -> None:
    m = manifest(kind="python", entrypoint=entry("storm:zero_backoff"))
    declares_full_jitter_and_a_budget(m)
    report = assay_target(m, plan(10, MODE))
    assert_service_lost(report, 10)
    [f] = report["faults"]
    assert f["storm"]["observed"]["shortest_wait_ms"] < 500  # its fair share of the limit


def test_an_http_agent_backing_off_without_jitter_retries_in_lockstep_and_loses_service(
    start_agent: StartAgent,
) -> None:
    # The example agent with a real exponential back-off but no jitter: every copy of the fleet
    # waits the same, so it is never admitted, whatever the manifest says about jitter.
    url = start_agent("--controls", "typed-repair", "--jitter", "none", "--backoff-ms", "1000")
    m = manifest(kind="http", url=url)
    declares_full_jitter_and_a_budget(m)
    report = assay_target(m, plan(10, MODE))
    assert_service_lost(report, 10)
    [f] = report["faults"]
    assert f["storm"]["observed"]["shortest_wait_ms"] >= 1000


def test_a_fleet_retrying_in_two_lockstep_cohorts_is_not_admitted() -> None:
    # Its back-off is 1 s a retry plus 250 ms for odd run numbers: half of a 100-agent fleet
    # retries together at each moment, 50 copies against 20 requests a tick.
    m = manifest(kind="python", entrypoint=entry("storm:coarse_jitter"))
    report = assay_target(m, plan(10, MODE))
    assert_service_lost(report, 10)
