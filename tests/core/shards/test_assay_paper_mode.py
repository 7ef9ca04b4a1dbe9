"""Paper mode reproduces the reference script's figures by executing the workflow."""

from __future__ import annotations

import json
from typing import Any

import pytest

from service.core.faults.plan import AssayPlan
from service.core.shards.assay import merge, plan_shards, run_assay, run_shard
from service.core.system.manifest import Manifest
from tests.core.conftest import ASSETS, example_dict, load_example

CASES: list[dict[str, Any]] = json.loads((ASSETS / "reference_figures.json").read_text())["cases"]
RATES = (
    "trials",
    "detected",
    "contained",
    "recovered",
    "verified",
    "useful_service",
    "unsafe_escape",
    "duplicate_effect",
    "unverifiable_release",
    "service_loss",
)


def _plan(case: dict[str, Any]) -> AssayPlan:
    families = () if case["fault"] == "all" else (case["fault"],)
    return AssayPlan(catalogue="paper", trials=case["trials"], seed=case["seed"], families=families)


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c['profile']}-s{c['seed']}-n{c['trials']}-{c['fault']}" for c in CASES]
)
def test_paper_mode_rates_equal_the_reference_script_per_domain_and_overall(
    case: dict[str, Any],
) -> None:
    report = run_assay(load_example(case["profile"]), _plan(case)).to_dict()
    for domain, expected in case["by_domain"].items():
        mine = report["by_domain"][domain]
        assert {k: mine[k] for k in RATES} == {k: expected[k] for k in RATES}, domain
    assert {k: report["overall"][k] for k in RATES} == {k: case["overall"][k] for k in RATES}


def test_published_figures_seed_188_two_thousand_trials(
    baseline: Manifest, typed: Manifest
) -> None:
    plan = AssayPlan(catalogue="paper", trials=2000, seed=188)
    base = run_assay(baseline, plan).to_dict()["overall"]
    typ = run_assay(typed, plan).to_dict()["overall"]
    # The paper prints one decimal: 69.5 %.
    assert f"{100 * base['unsafe_escape']:.1f}" == "69.5"
    assert typ["unsafe_escape"] == 0.0
    assert typ["unverifiable_release"] == 0.0
    assert typ["detected"] == typ["contained"] == 1.0
    assert typ["recovered"] == typ["verified"] == typ["useful_service"] == 0.906


def test_any_split_into_shards_merges_to_the_sequential_figures(typed: Manifest) -> None:
    plan = AssayPlan(catalogue="paper", trials=733, seed=9)
    whole = run_assay(typed, plan).to_dict()
    for size in (1, 50, 733):
        shards = plan_shards(typed, plan, size)
        results = [run_shard(typed, plan, s) for s in reversed(shards)]
        assert merge(typed, plan, results).to_dict() == whole


def test_each_trial_draws_its_own_workload(typed: Manifest) -> None:
    report = run_assay(
        typed, AssayPlan(catalogue="full", modes=("timeout_after_commit",), trials=3, seed=4)
    ).to_dict()
    samples = report["faults"][0]["samples"]
    ledgers = [(s["ledger"][0]["subject"], s["ledger"][0]["amount"]) for s in samples]
    assert len(set(ledgers)) == 3


def test_breaking_the_ledger_idempotency_check_changes_the_figures() -> None:
    data = example_dict("baseline")
    data["controls"] = {"idempotency": True}
    from service.core.system.manifest import parse_manifest

    manifest = parse_manifest(data)
    plan = AssayPlan(catalogue="paper", families=("tool",), trials=400, seed=188)
    honoured = run_assay(manifest, plan).to_dict()["by_domain"]["tool"]
    broken = run_assay(manifest, plan, honours_keys=False).to_dict()["by_domain"]["tool"]
    assert honoured["duplicate_effect"] == 0.0
    assert broken["duplicate_effect"] > 0.4


def test_the_reference_figures_are_the_seeds_published_table_and_the_scripts_case_list() -> None:
    # Where the asset comes from: the first case of each profile is the table the seed publishes
    # (seed 188, 2,000 trials), and the cases are the regeneration script's list, in its order.
    from tests.assets.regenerate_reference_figures import CASES as LISTED
    from tests.assets.regenerate_reference_figures import PROFILES

    assert [(c["profile"], c["seed"], c["trials"], c["fault"]) for c in CASES] == [
        (p, *case) for p in PROFILES for case in LISTED
    ]
    baseline, typed = (next(c for c in CASES if c["profile"] == p)["overall"] for p in PROFILES)
    assert (baseline["trials"], baseline["unsafe_escape"]) == (2000, 0.6945)
    assert (typed["unsafe_escape"], typed["unverifiable_release"]) == (0.0, 0.0)
    assert (typed["detected"], typed["contained"]) == (1.0, 1.0)
    assert typed["recovered"] == typed["verified"] == typed["useful_service"] == 0.906
