"""Storage quotas per assay: what a target hands back is cut before it is stored, the cut is
said, and no count the gate decided on is ever cut."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from service.core.evidence.quota import (
    Cut,
    Quota,
    cut_dossier,
    cut_event,
    cut_report,
    cut_shard,
    size,
)
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.signing.dossier import CandidateRef, predicate_from_report
from service.core.system.manifest import Manifest

SMALL = Quota(report_bytes=96 * 1024, samples_bytes=32 * 1024, dossier_bytes=96 * 1024)
HUGE = "x" * 300_000


def hoarding(report: dict[str, Any]) -> dict[str, Any]:
    """The report of a target that answered every trial with megabytes: each sample carries a
    long note and a hundred claims."""
    out = copy.deepcopy(report)
    for fault in out["faults"]:
        for sample in fault["samples"]:
            sample["claims"] = [{"note": f"claim {i} " + "y" * 2000} for i in range(100)]
            sample["note"] = HUGE
        if fault["first_violation"] is not None:
            fault["first_violation"]["note"] = HUGE
    return out


@pytest.fixture(scope="module")
def assayed(typed_repair: Manifest) -> dict[str, Any]:
    return run_assay(typed_repair, AssayPlan(catalogue="paper", trials=4, seed=5)).to_dict()


@pytest.fixture
def report(assayed: dict[str, Any]) -> dict[str, Any]:
    """A small assay's report, as the merge writes it: each test's own copy, so no cut made in
    place could pass for the report it was compared with."""
    return copy.deepcopy(assayed)


def predicate(report: dict[str, Any]) -> dict[str, Any]:
    """The dossier's predicate for `report`, before any cut."""
    return predicate_from_report(
        report,
        CandidateRef("c-1", "copperfin-returns", "1.6.0", "abc123", "ci-bot"),
        version=1,
        previous=None,
        issued_at="2026-11-30T00:00:00Z",
        triggers={},
    )


def counts(report: dict[str, Any]) -> list[Any]:
    """Everything of each fault but its sampled trials: what the gate decided on."""
    return [
        {k: v for k, v in f.items() if k not in ("samples", "first_violation")}
        for f in report["faults"]
    ]


def test_a_hoarding_report_is_cut_to_its_quota_with_every_count_kept_and_the_cut_said(
    report: dict[str, Any],
) -> None:
    hoarded = hoarding(report)
    assert size(hoarded) > 20 * SMALL.report_bytes
    stored = cut_report(hoarded, SMALL)
    assert size(stored) <= SMALL.report_bytes
    assert counts(stored) == counts(report)
    assert {k: v for k, v in stored.items() if k not in ("faults", "cut")} == {
        k: v for k, v in report.items() if k != "faults"
    }
    cut = stored["cut"]
    assert cut["strings"] > 0 and cut["characters"] > 0
    assert cut["samples"] + cut["entries"] > 0
    kept = [s for f in stored["faults"] for s in f["samples"]]
    assert kept, "what fits is kept"
    for sample in kept:  # each long string says how much of it is gone, however often cut
        text, lost = re.fullmatch(r"(x*)…\[cut: (\d+) more characters\]", sample["note"]).groups()
        assert len(text) + int(lost) == len(HUGE)


def test_a_report_that_fits_is_stored_as_it_was_without_a_cut(report: dict[str, Any]) -> None:
    assert cut_report(report, Quota()) == report


def test_the_dossier_says_what_the_shards_the_report_and_itself_cut(
    report: dict[str, Any],
) -> None:
    cut = cut_report(hoarding(report), Quota(), Cut(samples=7))
    whole = predicate(cut)
    signed = cut_dossier(whole, SMALL, cut["cut"])
    assert size(signed) <= SMALL.dossier_bytes
    assert signed["cut"]["samples"] >= 7
    assert signed["cut"]["characters"] > cut["cut"]["characters"]
    assert [r["intervention"] for r in signed["runs"]] == [r["intervention"] for r in whole["runs"]]
    assert signed["decision"] == whole["decision"] and signed["reasons"] == whole["reasons"]


def test_a_dossier_that_lost_nothing_has_no_cut(report: dict[str, Any]) -> None:
    whole = predicate(report)
    assert cut_dossier(whole, Quota(), report.get("cut")) == whole


def test_a_shard_keeps_its_share_of_the_samples_and_its_first_violation_first() -> None:
    violation = {"trial": 3, "claims": [{"note": "z" * 5000} for _ in range(400)]}
    payload = {
        "index": 0,
        "trials": 9,
        "tallies": {
            "f1": {
                "planned": 9,
                "samples": [{"trial": i, "note": "s" * 20_000} for i in range(9)],
                "first_violation": violation,
            }
        },
    }
    stored = cut_shard(payload, SMALL, shards=1)
    tally = stored["tallies"]["f1"]
    assert size(tally["samples"]) + size(tally["first_violation"]) <= 64 * 1024
    assert tally["planned"] == 9 and tally["first_violation"]["trial"] == 3
    assert 0 < len(tally["first_violation"]["claims"]) < 400
    assert stored["cut"]["entries"] > 0 and stored["cut"]["samples"] > 0


def test_an_event_is_cut_to_its_quota_and_says_so() -> None:
    data = {"error": "e" * 200_000, "attempt": 3}
    cut = cut_event(data, Quota())
    assert size(cut) <= Quota().event_bytes and cut["attempt"] == 3
    assert cut["cut"]["strings"] == 1 and cut_event({"attempt": 3}, Quota()) == {"attempt": 3}
