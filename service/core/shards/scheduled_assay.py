"""An assay's faults run by the one scheduler (`service.core.shards.scheduler`): on a world that
offers slots every fault's trials drawn by every free slot, each fault folded in trial order and
counted in the serial run's order; on one slot, the serial run itself. Under the fixed plan or a
sequential plan's rule per fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from service.core.decision.floors import Earlier
from service.core.decision.merge import merge
from service.core.decision.report import AssayReport
from service.core.evidence.pairs import removal
from service.core.evidence.spend import Meter
from service.core.evidence.stopping import Stop, Watch, rule_for
from service.core.evidence.tally import ShardResult, Tally
from service.core.faults.plan import AssayPlan
from service.core.shards.baselines import SharedBaselines
from service.core.shards.counting import fault_work
from service.core.shards.scheduler import FaultWork, run_scheduled, runtimes_of
from service.core.shards.shard import StopLimits, with_first_cause
from service.core.system.manifest import Manifest
from service.core.trial.engine import SlottedEngine, TrialEngine
from service.core.trial.target import Target


def run_scheduled_assay(
    manifest: Manifest,
    plan: AssayPlan,
    target: SlottedEngine | Target | TrialEngine | None,
    slots: int,
    progress: Callable[[int, int], None] | None,
    limits: StopLimits | None,
    honours_keys: bool,
    fault_done: Callable[[str, Tally, int, int], None] | None,
    meter: Meter,
    metered: bool,
    shared: SharedBaselines | None = None,
    *,
    trials_per_shard: int | None = None,
    earlier: Mapping[str, Earlier] | None = None,
) -> AssayReport:
    """`metered`: the fixed plan reports its spend (a clock or a budget); a sequential plan always
    does. Progress counts each finished fault's planned trials against the plan's total, and
    (`trials_per_shard`) every so many of a fault's trials as they are counted. `shared`: the
    assay's shared baselines (a trial's baseline unit reads the run another fault's trial on the
    tool ran, or runs it). `earlier`: as for `merge` (the fixed plan only)."""
    cat = plan.resolve_catalogue()
    sequential = plan.rule_for(manifest.target.kind) == "sequential"
    faults = [cat.by_id(f.id) for f in plan.faults()]
    ids = [f.id for f in faults]  # each work's fault, by its place in the plan
    removals = {f.id: removal(manifest, f) for f in faults}
    works: list[FaultWork] = []
    for pos, spec in enumerate(faults):
        watch = Watch(rule_for(manifest, plan, spec)) if sequential else None
        works.append(fault_work(pos, plan, spec, pos, removals, watch, plan.trials, 0, shared))
    runtimes = runtimes_of(manifest, cat, target, slots, honours_keys=honours_keys)
    total = plan.trials * len(faults)
    done = [0]

    def finished(work: FaultWork) -> None:
        done[0] += work.trials
        if progress is not None:
            progress(done[0], total)
        if fault_done is not None:
            fault_done(ids[work.index], work.tally, done[0], total)

    def counted(work: FaultWork, _spent: object, out: object) -> None:
        # Counted in plan order: every fault before this one is counted (its planned trials).
        if out is not None and work.done % every == 0 and work.done < work.trials:
            assert progress is not None
            progress(work.index * plan.trials + work.done, total)

    every = plan.trials if sequential or not trials_per_shard else max(1, trials_per_shard)
    chunks = progress is not None and every < plan.trials
    use = meter if metered or sequential else None
    # Counted in the serial run's order: every stop falls at its trial at any concurrency. A
    # budget needs a meter even when the spend is not reported.
    reason, trials, _ = run_scheduled(
        runtimes,
        works,
        plan,
        limits,
        use,
        fault_done=finished,
        trial_done=counted if chunks else None,
        ordered=True,
    )
    for work in works:
        # A stopped assay: the faults that ran some trials are reported as they stand.
        if not work.reported and work.done:
            work.reported = True
            finished(work)
    if reason is not None and use is not None:
        reason = use.settled(plan.stop, reason)
    if reason is not None:
        reason = with_first_cause(reason, [w.tally for w in works])
    folded = ShardResult(-1, {ids[w.index]: w.tally for w in works if w.done}, trials)
    if not sequential:
        return merge(
            manifest,
            plan,
            [folded],
            reason,
            spend=meter.view("fixed") if metered else None,
            earlier=earlier,
        )
    stops: dict[str, Stop] = {}
    for work in works:
        if work.watch is not None and work.watch.stop is not None:
            stops[ids[work.index]] = work.watch.stop
        elif reason is not None and (work.done or work.cut):
            stops[ids[work.index]] = Stop("stopped", reason, work.done)
    stop_views = {f: s.view() for f, s in stops.items()}
    return merge(manifest, plan, [folded], reason, stop_views, meter.view("sequential"))
