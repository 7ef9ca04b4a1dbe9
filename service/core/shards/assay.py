"""An assay: shards of trials, run into tallies, and merged into the report.

A shard is (fault, trial range) — or, in paper mode, a range of the script's global trial
sequence. Tallies are plain counts, so merging is addition: any split into shards, run in any
order on any number of workers, merges to exactly the figures of one sequential run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from service.core.decision.floors import Earlier
from service.core.decision.merge import merge
from service.core.decision.report import AssayReport
from service.core.evidence.pairs import removal
from service.core.evidence.spend import Meter, budgeted
from service.core.evidence.stopping import Watch
from service.core.evidence.tally import ShardResult, Tally
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards import arms
from service.core.shards.baselines import SharedBaselines
from service.core.shards.held import run_held
from service.core.shards.scheduled_assay import run_scheduled_assay
from service.core.shards.scheduler import FaultWork, run_scheduled, runtimes_of
from service.core.shards.shard import (
    ShardSpec,
    StopLimits,
    plan_shards,
    sample_of,
    stream_roots,
    trial_at,
    trial_keys,
    with_first_cause,
)
from service.core.shards.slots import slots_of
from service.core.shards.slotted import SlotTrial
from service.core.system.manifest import Manifest
from service.core.trial.engine import SlottedEngine, TrialEngine
from service.core.trial.harness import Runtime, run_trial
from service.core.trial.rng import LCG
from service.core.trial.target import Target

# The assay's public surface: what runs shards and assays, and what they hand back.
__all__ = [
    "AssayReport",
    "ShardResult",
    "ShardSpec",
    "StopLimits",
    "merge",
    "plan_shards",
    "replay_trial",
    "run_assay",
    "run_shard",
]


def run_shard(
    manifest: Manifest,
    plan: AssayPlan,
    shard: ShardSpec,
    should_stop: Callable[[], bool] | None = None,
    target: Target | TrialEngine | None = None,
    batch: int = 50,
    limits: StopLimits | None = None,
    guard: Callable[[FaultSpec], str | None] | None = None,
    namespace: str | None = None,
    honours_keys: bool = True,
    concurrency: int = 1,
    watch: Watch | None = None,
    meter: Meter | None = None,
    shared: SharedBaselines | None = None,
) -> ShardResult:
    """Run a shard's trials into tallies on the one scheduler: a fault's shard held alone
    (`service.core.shards.held`), a paper-mode shard as one work of mixed faults.
    `honours_keys=False` runs a sandbox whose ledger ignores idempotency keys (a broken world,
    to show figures come from execution). `concurrency`: trials at once, for an engine whose
    world offers slots (`SlottedEngine`); the tallies are the same at any concurrency. `watch`:
    a sequential plan's rule for the shard's one fault, read after every trial. `meter`: what
    the trials spend, checked against the plan's budgets after every trial. `shared`: the
    assay's shared baselines (a plan with `baseline: shared`; None: the shard shares its
    baselines with no other shard)."""
    slots = slots_of(target.slots, concurrency) if isinstance(target, SlottedEngine) else 1
    if shard.fault_id is not None:
        # A fault's shard: the one scheduler, as the worker runs the shards it holds (a shard is
        # held alone; on one slot, the serial run).
        held = run_held(
            manifest,
            plan,
            [(shard, watch)],
            target,
            slots,
            should_stop=should_stop,
            batch=batch,
            limits=limits,
            guard=guard,
            namespace=namespace,
            honours_keys=honours_keys,
            meter=meter,
            shared=shared,
        )
        return held[0][0]
    return _paper_shard(
        manifest,
        plan,
        shard,
        target,
        slots,
        should_stop,
        batch,
        limits,
        guard,
        namespace,
        honours_keys,
        meter,
    )


def _paper_shard(
    manifest: Manifest,
    plan: AssayPlan,
    shard: ShardSpec,
    target: Target | TrialEngine | None,
    slots: int,
    should_stop: Callable[[], bool] | None,
    batch: int,
    limits: StopLimits | None,
    guard: Callable[[FaultSpec], str | None] | None,
    namespace: str | None,
    honours_keys: bool,
    meter: Meter | None,
) -> ShardResult:
    """A paper-mode shard on the one scheduler: one work (a `FaultWork` with no fault of its
    own) whose trial k is of the fault the script's generator draws for it, counted into that
    fault's tally in trial order; on one slot, the serial run in this thread."""
    cat = plan.resolve_catalogue()
    removals = {f.id: removal(manifest, f) for f in plan.faults()}
    domains = plan.domains()
    by_domain = [cat.in_domain(d) for d in domains]
    lcg = LCG(plan.seed)
    lcg.skip(shard.start)
    nd = len(domains)

    def pick(k: int) -> FaultSpec:
        # The generator's next draw: the scheduler asks once per trial, in trial order.
        return lcg.choice(by_domain[k % nd])

    wroot, sroot = stream_roots(plan, None)
    sample_key, sample_base = sample_of(plan, None, 0)
    threshold = plan.sample_threshold()
    trial = SlotTrial(
        plan, pick, wroot, sroot, 0, threshold, sample_key, removals, sample_base=sample_base
    )
    work = FaultWork(0, None, trial, shard.stop - shard.start, None, start=shard.start)
    runtimes = runtimes_of(manifest, cat, target, slots, guard, namespace, honours_keys)
    reason, done, out = run_scheduled(runtimes, [work], plan, limits, meter, should_stop, batch)
    if reason is not None and meter is not None:
        reason = meter.settled(plan.stop, reason)
    tallies = work.tallies
    if reason is not None:
        reason = with_first_cause(reason, tallies.values())
    return ShardResult(shard.index, tallies, done, reason is not None, reason, out[0], out[1])


def run_assay(
    manifest: Manifest,
    plan: AssayPlan,
    target: Target | TrialEngine | None = None,
    progress: Callable[[int, int], None] | None = None,
    trials_per_shard: int = 500,
    limits: StopLimits | None = None,
    honours_keys: bool = True,
    fault_done: Callable[[str, Tally, int, int], None] | None = None,
    concurrency: int = 1,
    clock: Callable[[], float] | None = None,
    earlier: Mapping[str, Earlier] | None = None,
) -> AssayReport:
    """Run the assay; a tripped stop condition ends it (and blocks it). A plan of faults runs on
    the one scheduler (`service.core.shards.scheduled_assay`), a paper-mode plan shard by shard.
    `honours_keys`: as for `run_shard`. `fault_done(fault_id, tally, trials_done, total)` is
    called once each fault is finished, or cut short by a stop (not in paper mode, whose shards
    mix faults); `progress(done, total)` every `trials_per_shard` trials of a fault and as each
    fault (or paper shard) finishes. `concurrency`: as for `run_shard`. A sequential plan
    (`AssayPlan.rule_for`) runs each fault until its rule (`service.core.evidence.stopping`)
    stops it: the trials it did not need never run. `clock` (seconds; else the limits') times
    the runs for the report's spend and `max_seconds`. `earlier`: as for `merge`, read by the
    fixed plan (an attempt of a release re-run in process; the service merges every plan's
    shards with it).

    Over 60 lines on purpose: the paper-mode shard loop folds its shards as they come."""
    meter = Meter(clock if clock is not None or limits is None else limits.clock)
    # Spend is timing, not a figure: an untimed, unbudgeted fixed assay reports none, so its
    # trials are not metered at all (the paper assay's hot loop pays nothing for it).
    metered = meter.clock is not None or budgeted(plan.stop)
    slots = slots_of(target.slots, concurrency) if isinstance(target, SlottedEngine) else 1
    sequential = plan.rule_for(manifest.target.kind) == "sequential"
    if earlier and sequential:
        raise ValueError("earlier attempts are read in process by the fixed plan's shards only")
    if not plan.paper:
        # The one scheduler: every free slot draws from every fault (one slot: the serial run).
        # One run of each shared baseline for the whole assay.
        return run_scheduled_assay(
            manifest,
            plan,
            target,
            slots,
            progress,
            limits,
            honours_keys,
            fault_done,
            meter,
            metered,
            SharedBaselines() if plan.baseline == "shared" else None,
            trials_per_shard=trials_per_shard,
            earlier=earlier,
        )
    # Paper mode: the script's trial sequence in shards, faults mixed within each.
    shards = plan_shards(manifest, plan, trials_per_shard)
    total = sum(s.stop - s.start for s in shards)
    # Shard results are folded as they come: memory stays flat however many trials run.
    folded = ShardResult(-1, {}, 0)
    done = 0
    stopped: str | None = None
    for shard in shards:
        result = run_shard(
            manifest,
            plan,
            shard,
            target=target,
            limits=limits,
            honours_keys=honours_keys,
            concurrency=concurrency,
            meter=meter if metered else None,
        )
        folded.trials += result.trials
        for fid, tally in result.tallies.items():
            mine = folded.tallies.get(fid)
            if mine is None:
                folded.tallies[fid] = tally
            else:
                mine.merge(tally)
        done += shard.stop - shard.start
        if progress is not None:
            progress(done, total)
        if result.stop_reason is not None:
            stopped = result.stop_reason
            break
        if limits is not None:
            errors = sum(t.all_errors for t in result.tallies.values())
            limits = replace(
                limits,
                used_effects=limits.used_effects + result.effects,
                used_unsafe=limits.used_unsafe + result.unsafe,
                used_target_errors=limits.used_target_errors + errors,
            )
    spend = meter.view("fixed") if metered else None
    return merge(manifest, plan, [folded], stopped, spend=spend, earlier=earlier)


def replay_trial(
    manifest: Manifest, plan: AssayPlan, index: int, target: Target | TrialEngine | None = None
) -> dict[str, Any]:
    """Re-execute one trial of a run and return its full trace."""
    cat = plan.resolve_catalogue()
    spec, fault_id, k = trial_at(plan, cat, index)
    wkey, skey = trial_keys(plan, fault_id, k)
    rt = Runtime(manifest, cat, target)
    rec = run_trial(rt, spec, wkey, skey, capture=True)
    sample = arms.sample(rec, index)
    return {
        "trial": index,
        "fault": spec.id,
        "coverage_key": spec.coverage_key(),
        "exercised": rec.exercised,
        "target_error": rec.target_error,
        "workload": rec.workload.view(),
        "calls": rec.trace if rec.sample is None else rec.sample.get("calls"),
        "world": rec.world.view(),
        **{key: sample[key] for key in ("injections", "ledger", "evidence", "claim", "outcome")},
    }
