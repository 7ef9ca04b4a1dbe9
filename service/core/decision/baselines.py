"""What a plan that shares baselines per tool (`baseline: shared`) changes in the report: each
fault names the runs its trials read (`baseline_run`), and the summaries add each run once.

Each fault's tally holds the shared runs it read, so adding every fault's baseline arm, as the
`by_domain` and `overall` summaries do, would count one run once per fault that read it and
narrow their intervals with runs that never happened. Each tool's runs are summed once instead:
a fault reads its tool's runs in trial order, so the fault that read the most of them read every
one the others did (its arm is theirs and more).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.core.evidence.figures import JSONObject
from service.core.evidence.tally import ArmCounts, Tally
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.trial.rng import shared_root


def baseline_run(plan: AssayPlan, spec: FaultSpec) -> JSONObject | None:
    """The baseline runs a fault's trials used when shared (else each trial ran its own):
    trial k read the tool's run k, whose workload key is `derive(root, k)`."""
    if plan.baseline != "shared" or plan.paper or not plan.matched_baseline:
        return None
    return {"shared_by": spec.target, "workload": f"{shared_root(plan.seed, spec.target):016x}"}


def summed_once(
    faults: Sequence[FaultSpec], tallies: Mapping[str, Tally]
) -> tuple[dict[str, ArmCounts], ArmCounts]:
    """The baseline arm per domain and overall, each tool's shared runs counted once."""
    widest: dict[tuple[str, str], ArmCounts] = {}
    for spec in faults:
        arm = tallies[spec.id].arms["baseline"]
        key = (spec.domain.value, spec.target)
        if key not in widest or arm.n > widest[key].n:
            widest[key] = arm
    by_domain: dict[str, ArmCounts] = {}
    tools: dict[str, ArmCounts] = {}
    for (domain, tool), arm in widest.items():
        by_domain.setdefault(domain, ArmCounts()).merge(arm)
        if tool not in tools or arm.n > tools[tool].n:
            tools[tool] = arm
    overall = ArmCounts()
    for arm in tools.values():
        overall.merge(arm)
    return by_domain, overall
