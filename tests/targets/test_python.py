"""User callables assayed through the `python` target: their defects reach the signature."""

from __future__ import annotations

import pytest

from service.core.errors import ManifestInvalid
from service.targets import load_python_target, load_target
from tests.targets.conftest import assay, example, fault, plan

RETRY_WITHOUT_KEY = "tests.targets.agents.retry_without_key:run"
TRUSTING = "tests.targets.agents.trusting:run"


def test_an_agent_that_retries_without_an_idempotency_key_duplicates_the_refund() -> None:
    manifest = example("typed", kind="python", entrypoint=RETRY_WITHOUT_KEY)
    report = assay(manifest, plan(20, "timeout_after_commit"), load_target(manifest))
    counts = fault(report, "timeout_after_commit")["signature"]["counts"]
    assert counts["duplicate_effect"] == 20
    assert counts["unsafe_escape"] == 20
    assert report["decision"] == "block"
    assert "duplicate_effect" in {r["code"] for r in report["reasons"]}


def test_an_agent_that_trusts_a_200_without_readback_releases_unproved() -> None:
    manifest = example("typed", kind="python", entrypoint=TRUSTING)
    report = assay(manifest, plan(20, "partial_success_response"), load_target(manifest))
    counts = fault(report, "partial_success_response")["signature"]["counts"]
    assert counts["unverifiable_release"] == 20
    assert counts["duplicate_effect"] == 0
    assert report["decision"] == "block"
    assert "unverifiable_release" in {r["code"] for r in report["reasons"]}


def test_the_trusting_agent_is_clean_where_the_reply_carries_its_receipt() -> None:
    manifest = example("typed", kind="python", entrypoint=TRUSTING)
    report = assay(manifest, plan(10, "timeout_before_send"), load_target(manifest))
    counts = fault(report, "timeout_before_send")["signature"]["counts"]
    assert counts["unverifiable_release"] == 0
    assert counts["duplicate_effect"] == 0


def test_load_target_gives_none_for_the_reference_workflow() -> None:
    assert load_target(example("typed")) is None


@pytest.mark.parametrize(
    ("entrypoint", "problem"),
    [
        ("tests.targets.agents.no_such_module:run", "cannot import"),
        ("tests.targets.agents.trusting:missing", "has no attribute"),
        ("tests.targets.agents.trusting:NOT_CALLABLE", "is not callable"),
        ("tests.targets.agents.trusting:", "is not 'module:callable'"),
    ],
)
def test_an_entrypoint_that_cannot_be_loaded_is_a_manifest_error_naming_the_field(
    entrypoint: str, problem: str
) -> None:
    with pytest.raises(ManifestInvalid) as err:
        load_python_target(entrypoint)
    assert err.value.field == "target.entrypoint"
    assert problem in err.value.message
