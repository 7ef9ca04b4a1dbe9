"""Builds, from the tally to the decision and the signed dossier: counted per (endpoint, build)
like the other counters, merged by addition, stored so that an old shard still reads, and held
(`build_mismatch`) where what answered was not shown to be the declared build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.core.decision.gate import Decision, FaultEvidence, decide
from service.core.decision.report import AssayReport
from service.core.errors import ManifestInvalid
from service.core.evidence.builds import EndpointBuilds, endpoint_builds
from service.core.evidence.tally import ShardResult, Tally
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.signing.dossier import CandidateRef, predicate_from_report
from service.core.system.manifest import (
    Envelope,
    Manifest,
    build_endpoints,
    parse_manifest,
    parse_manifest_json,
)

ROOT = Path(__file__).resolve().parents[3]
SHOP = "tools.servers.shop"


def test_a_tally_counts_builds_per_endpoint_and_merges_them_by_addition() -> None:
    a, b = Tally(), Tally()
    a.saw(((SHOP, "shop@1"), ("target.runner", None)))
    a.saw(((SHOP, "shop@1"),))
    b.saw(((SHOP, "shop@2"),))
    a.merge(b)
    assert a.builds == {(SHOP, "shop@1"): 2, ("target.runner", None): 1, (SHOP, "shop@2"): 1}


def test_builds_survive_the_stored_shard_and_an_old_shard_without_them_still_reads() -> None:
    t = Tally()
    t.saw(((SHOP, "shop@1"), ("target", None)))
    stored = json.loads(json.dumps(ShardResult(0, {"f": t}, 1).to_dict()))
    assert stored["tallies"]["f"]["builds"] == [["target", None, 1], [SHOP, "shop@1", 1]]
    assert ShardResult.from_dict(stored).tallies["f"].builds == t.builds
    del stored["tallies"]["f"]["builds"]  # a shard stored before builds were recorded
    assert ShardResult.from_dict(stored).tallies["f"].builds == {}
    assert "builds" not in Tally().to_dict()  # nothing reported: nothing written


def evidence(*builds: EndpointBuilds) -> FaultEvidence:
    clean = {"contained": 20, "recovered": 20, "verified": 20, "useful_service": 20}
    return FaultEvidence("f", 20, 20, clean, "valid", builds=builds)


@pytest.mark.parametrize(
    ("declared", "reported", "said"),
    [
        ("shop@1", (("shop@1", 8), ("shop@2", 4)), "reported 'shop@2' in 4 of 12 trials"),
        ("shop@1", ((None, 12),), "reported nothing in 12 of 12 trials"),
        (None, (("shop@1", 6), ("shop@2", 6)), "reported 2 different builds"),
    ],
)
def test_another_build_or_none_where_one_was_declared_holds_naming_endpoint_and_builds(
    declared: str | None, reported: tuple[tuple[str | None, int], ...], said: str
) -> None:
    verdict = decide([evidence(EndpointBuilds(SHOP, declared, reported))], Envelope())
    assert verdict.decision is Decision.HOLD
    [reason] = verdict.reasons
    assert (reason.code, reason.fault, reason.severity) == ("build_mismatch", "f", Decision.HOLD)
    assert SHOP in reason.message and said in reason.message
    if declared is not None:
        assert repr(declared) in reason.message


@pytest.mark.parametrize(
    ("declared", "reported", "assurance"),
    [
        ("shop@1", (("shop@1", 12),), "reported"),
        (None, (("shop@1", 12),), "reported"),
        (None, ((None, 12),), None),
        ("shop@1", (), "declared"),  # declared, and never answered in these runs
    ],
)
def test_a_build_shown_in_every_run_or_never_declared_decides_nothing(
    declared: str | None, reported: tuple[tuple[str | None, int], ...], assurance: str | None
) -> None:
    builds = EndpointBuilds(SHOP, declared, reported)
    assert builds.assurance == assurance
    assert decide([evidence(builds)], Envelope()).decision is Decision.ALLOW


def test_endpoints_are_those_that_declared_or_reported_with_counts_summed() -> None:
    out = endpoint_builds(
        {"target.runner": "agent@3", SHOP: None},
        {(SHOP, "shop@1"): 2},
        {(SHOP, "shop@1"): 1, (SHOP, None): 1},
    )
    assert out == (
        EndpointBuilds("target.runner", "agent@3", ()),
        EndpointBuilds(SHOP, None, ((None, 1), ("shop@1", 3))),
    )


def example(path: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / path).read_text())
    return data


@pytest.mark.parametrize(
    ("path", "without", "digest"),
    [
        # The digests these examples had before builds existed (computed on that commit).
        (
            "examples/http-agent/typed.json",
            ("target",),
            "fffb7b16ec2a5a0f0227c0906772afde9933c5e860687abc04e6bd522126a666",
        ),
        (
            "examples/mcp-warehouse/manifest.careful.json",
            ("tools", "servers"),
            "a219101badb906468cb3c3ef24a51d5b72c2eec49f94c19aa94eb5ad58362c28",
        ),
    ],
)
def test_a_manifest_without_a_build_keeps_its_digest(
    path: str, without: tuple[str, ...], digest: str
) -> None:
    data = example(path)
    section = data
    for key in without:
        section = section[key]
    for entry in section.values() if without == ("tools", "servers") else [section]:
        assert entry.pop("build")
    # Read as that commit read it: floors on the point estimate, its default then (the default
    # is hashed, so the lower bound that is the default now is another digest).
    data.setdefault("envelope", {})["floor_on"] = "point"
    assert parse_manifest_json(json.dumps(data)).digest() == digest
    assert parse_manifest_json(json.dumps(example(path))).digest() != digest


def test_each_remote_endpoint_may_declare_a_build_and_code_may_not() -> None:
    careful = parse_manifest(example("examples/mcp-warehouse/manifest.careful.json"))
    assert build_endpoints(careful) == {
        "tools.servers.admin": "warehouse-admin@1.0.0",
        SHOP: "warehouse-shop@1.0.0",
    }
    data = example("examples/mcp-warehouse/manifest.careful.json")
    data["target"]["runner"]["build"] = "agent@1"  # a command runner: code the gate runs
    with pytest.raises(ManifestInvalid) as refused:
        parse_manifest(data)
    assert refused.value.field == "target.runner"
    data["target"]["runner"] = {"kind": "http", "url": "http://127.0.0.1:9/", "build": "agent@1"}
    assert build_endpoints(parse_manifest(data))["target.runner"] == "agent@1"
    data["tools"]["servers"]["shop"] = {"command": ["python", "shop.py"], "build": "shop@1"}
    with pytest.raises(ManifestInvalid) as refused:
        parse_manifest(data)
    assert refused.value.field == "tools.servers.shop.build"
    data["tools"]["servers"]["shop"] = {"url": "http://127.0.0.1:9/", "build": " shop@1"}
    with pytest.raises(ManifestInvalid) as refused:
        parse_manifest(data)
    assert refused.value.field == "tools.servers.shop.build"


def test_the_report_and_the_dossier_carry_builds_only_when_an_endpoint_reported(
    typed_repair: Manifest,
) -> None:
    report = run_assay(typed_repair, AssayPlan(catalogue="paper", trials=20, seed=3))
    ref = CandidateRef("c1", "copperfin", "1.0")
    args: dict[str, Any] = {"version": 1, "previous": None, "issued_at": "x", "triggers": {}}
    assert "builds" not in report.to_dict()
    assert "builds" not in predicate_from_report(report, ref, **args)
    shop = EndpointBuilds(SHOP, "shop@1", (("shop@1", 20),))
    with_builds = AssayReport.from_dict({**report.to_dict(), "builds": {SHOP: shop.view()}})
    assert with_builds.builds == (shop,)
    assert AssayReport.from_dict(with_builds.to_dict()) == with_builds
    predicate = predicate_from_report(with_builds, ref, **args)
    assert predicate["builds"] == {
        SHOP: {
            "declared": "shop@1",
            "reported": [{"build": "shop@1", "trials": 20}],
            "assurance": "reported",
        }
    }
