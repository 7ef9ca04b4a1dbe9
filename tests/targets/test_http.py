"""The example HTTP agent, assayed over real HTTP on loopback, against the reference workflow."""

from __future__ import annotations

import http.client
import json

import pytest

from service.core.shards.assay import replay_trial
from service.targets import HttpTarget, load_target
from tests.targets.conftest import StartAgent, assay, example, fault, plan

FULL = plan(4)

# The baseline manifest's retry, as the agent really does it: no jitter.
NAIVE_RETRY = ("--max-attempts", "3", "--backoff-ms", "1000", "--jitter", "none")


def outcomes(report: dict[str, object]) -> dict[str, object]:
    """Per fault: everything the oracle counted, in every arm, and the counterfactual verdict."""
    faults = report["faults"]
    assert isinstance(faults, list)
    return {
        f["id"]: {
            "exercised": f["exercised"],
            "signature": f["signature"]["counts"],
            "baseline": f["baseline"],
            "counterfactual": f["counterfactual"],
        }
        for f in faults
    }


@pytest.mark.parametrize(
    ("manifest", "switches"),
    [
        ("typed", ("--controls", "typed")),
        ("typed-repair", ("--controls", "typed-repair")),
        (
            "baseline",
            (
                "--controls",
                "naive",
                "--max-attempts",
                "3",
                "--backoff-ms",
                "1000",
                "--jitter",
                "none",
            ),
        ),
    ],
)
def test_the_http_agent_matches_the_reference_on_every_fault(
    start_agent: StartAgent, manifest: str, switches: tuple[str, ...]
) -> None:
    url = start_agent(*switches)
    reference = assay(example(manifest), FULL)
    with HttpTarget(url) as target:
        over_http = assay(example(manifest, kind="http", url=url), FULL, target)
    assert outcomes(over_http) == outcomes(reference)
    assert over_http["decision"] == reference["decision"]
    assert all(f["target_errors"] == 0 for f in over_http["faults"])


def test_the_naive_http_agent_duplicates_the_refund_on_timeout_after_commit(
    start_agent: StartAgent,
) -> None:
    url = start_agent(
        "--controls", "naive", "--max-attempts", "3", "--backoff-ms", "1000", "--jitter", "none"
    )
    manifest = example("baseline", kind="http", url=url)
    with HttpTarget(url) as target:
        report = assay(manifest, plan(10, "timeout_after_commit"), target)
    signature = fault(report, "timeout_after_commit")["signature"]
    assert signature["counts"]["duplicate_effect"] == 10
    assert report["decision"] == "block"


def test_the_typed_http_agent_contains_timeout_after_commit_and_its_counterfactual_is_valid(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--controls", "typed")
    with HttpTarget(url) as target:
        manifest = example("typed", kind="http", url=url)
        report = assay(manifest, plan(10, "timeout_after_commit"), target)
    entry = fault(report, "timeout_after_commit")
    assert entry["signature"]["counts"]["duplicate_effect"] == 0
    assert entry["signature"]["counts"]["useful_service"] == 10
    # The task told the agent to switch idempotency off, and the agent did: the pair differs.
    assert entry["counterfactual"]["status"] == "valid"
    assert entry["counterfactual"]["signature_without_control"]["duplicate_effect"] > 0


def test_a_target_that_cannot_switch_a_control_off_leaves_that_fault_untested(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--controls", "typed")
    manifest = example("typed", kind="http", url=url, cannot_disable=["idempotency"])
    with HttpTarget(url) as target:
        report = assay(manifest, plan(5, "timeout_after_commit"), target)
    assert fault(report, "timeout_after_commit")["counterfactual"]["status"] == "untested"
    assert "counterfactual_untested" in {r["code"] for r in report["reasons"]}
    assert report["decision"] != "allow"


def test_trace_lineage_action_id_and_idempotency_key_cross_the_process_boundary(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--controls", "typed")
    with HttpTarget(url) as target:
        trial = replay_trial(example("typed"), plan(3, "timeout_after_commit"), 0, target)
    decision = next(r for r in trial["evidence"] if r["kind"] == "decision")
    [entry] = trial["ledger"]
    assert entry["trace_id"] == decision["trace_id"]
    assert entry["action_id"] == decision["action_id"]
    # The refund carried the logical action id as its Idempotency-Key header.
    refunds = [c for c in trial["calls"] if c.get("call") == "payments.refund"]
    assert refunds
    assert {c["args"]["idempotency_key"] for c in refunds} == {entry["action_id"]}


def test_tool_endpoints_refuse_a_request_without_an_open_trial() -> None:
    target = HttpTarget("http://127.0.0.1:9/")
    try:
        base = target.server.base_url.removeprefix("http://")
        host, port = base.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        conn.request("POST", "/v1/orders/read", json.dumps({"order_id": "x"}))
        resp = conn.getresponse()
        assert resp.status == 401
        assert json.loads(resp.read())["error"] == "unknown_trial"
        conn.close()
    finally:
        target.close()


def test_load_target_gives_the_http_adapter_for_an_http_manifest() -> None:
    target = load_target(example("typed", kind="http", url="http://127.0.0.1:8081/"))
    assert isinstance(target, HttpTarget)
    target.close()
