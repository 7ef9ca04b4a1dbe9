"""Under shared baselines the summaries add each tool's runs once: a run read by four faults is
one run of evidence in `by_domain` and `overall`, not four."""

from __future__ import annotations

from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Manifest

REFUND = ("timeout_after_commit", "timeout_before_send", "reject_before_write", "malformed_output")


def test_the_overall_baseline_counts_each_shared_run_once_and_a_per_fault_plan_every_run(
    typed: Manifest,
) -> None:
    modes = (*REFUND, "subject_swap")  # four faults on the refund API, one on the contract
    shared = run_assay(typed, AssayPlan(modes=modes, trials=5, baseline="shared")).to_dict()
    alone = run_assay(typed, AssayPlan(modes=modes, trials=5)).to_dict()
    assert [f["baseline"]["trials"] for f in shared["faults"]] == [5] * 5
    assert shared["overall"]["baseline"]["trials"] == 10  # two tools, five runs each
    assert alone["overall"]["baseline"]["trials"] == 25  # every fault its own five
    tool = shared["by_domain"]["tool"]["baseline"]["trials"]
    assert tool == 5  # the refund API's four faults are tool faults: one set of runs
