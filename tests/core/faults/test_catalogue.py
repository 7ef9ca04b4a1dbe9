"""The full catalogue holds the distinctions the paper insists on, as data."""

from __future__ import annotations

import pytest

from service.core.errors import CatalogueInvalid
from service.core.faults.catalogue import Domain, custom_catalogue, full_catalogue, paper_catalogue
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Manifest


def test_the_full_catalogue_has_at_least_sixteen_modes_with_the_required_distinctions() -> None:
    cat = full_catalogue()
    assert len(cat.faults) >= 16
    ids = {f.id for f in cat.faults}
    assert {
        "timeout_before_send",
        "reject_before_write",
        "timeout_after_commit",
        "malformed_output",
        "drifting_output",
        "retry_storm",
        "timeout_then_dropped_receipt",
    } <= ids
    assert {f.domain for f in cat.faults} == set(Domain)


def test_the_paper_catalogue_is_the_scripts_ten_modes_in_its_order() -> None:
    cat = paper_catalogue()
    assert [f.id for f in cat.in_domain(Domain.TOOL)] == [
        "timeout_after_commit",
        "partial_success_response",
    ]
    assert len(cat.faults) == 10


def test_the_three_timeouts_enter_at_different_phases_and_keys() -> None:
    cat = full_catalogue()
    timeouts = [
        cat.by_id(i) for i in ("timeout_before_send", "reject_before_write", "timeout_after_commit")
    ]
    assert len({t.phase for t in timeouts}) == 3
    assert len({t.coverage_key() for t in timeouts}) == 3


def test_the_same_timeout_needs_three_recovery_laws(baseline: Manifest, typed: Manifest) -> None:
    plan = AssayPlan(
        modes=("timeout_before_send", "reject_before_write", "timeout_after_commit"),
        trials=40,
        seed=3,
    )
    naive = {f["id"]: f["signature"] for f in run_assay(baseline, plan).to_dict()["faults"]}
    # A blind retry is right before the request leaves and before the durable write...
    assert naive["timeout_before_send"]["duplicate_effect"] == 0.0
    assert naive["reject_before_write"]["duplicate_effect"] == 0.0
    assert naive["timeout_before_send"]["useful_service"] == 1.0
    # ...and duplicates the refund once the provider has committed.
    assert naive["timeout_after_commit"]["duplicate_effect"] == 1.0
    resolved = {f["id"]: f["signature"] for f in run_assay(typed, plan).to_dict()["faults"]}
    assert all(s["useful_service"] == 1.0 for s in resolved.values())


def test_a_synchronised_retry_storm_peak_collapses_with_jitter_and_a_shared_budget(
    baseline: Manifest,
) -> None:
    report = run_assay(baseline, AssayPlan(modes=("retry_storm",), trials=20, seed=5)).to_dict()
    storm = report["faults"][0]["storm"]
    peaks = storm["peak_concurrent_retries"]
    assert peaks["without_jitter_or_budget_max"] == 100
    assert peaks["with_jitter_and_budget_max"] * 4 <= peaks["without_jitter_or_budget_max"]
    assert storm["agents_completed_mean"]["with_jitter_and_budget"] == 100
    assert report["faults"][0]["signature"]["useful_service"] == 0.0


def test_the_ordered_composition_fires_both_steps_in_order(typed: Manifest) -> None:
    report = run_assay(
        typed, AssayPlan(modes=("timeout_then_dropped_receipt",), trials=5, seed=1)
    ).to_dict()
    fault = report["faults"][0]
    assert fault["exercised"] == 5
    injections = fault["samples"][0]["injections"]
    assert [i["fault"] for i in injections] == [
        "timeout_then_dropped_receipt",
        "drop_recovery_receipt",
    ]
    assert fault["signature"]["useful_service"] == 1.0


def test_a_catalogue_entry_with_an_unknown_boundary_is_refused() -> None:
    spec = full_catalogue().by_id("timeout_after_commit").model_dump(mode="json")
    spec["boundary"] = "payments.teleport"
    with pytest.raises(CatalogueInvalid):
        custom_catalogue("x", [spec])
