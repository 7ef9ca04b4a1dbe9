"""A sequential plan's assay: each fault in one shard, ended by its rule
(`service.core.evidence.stopping`) as soon as the decision cannot change at the plan's error; the
trials it did not need never run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from service.core.decision.merge import merge
from service.core.decision.report import AssayReport
from service.core.evidence.spend import Meter
from service.core.evidence.stopping import Stop, Watch, rule_for
from service.core.evidence.tally import ShardResult, Tally
from service.core.faults.plan import AssayPlan
from service.core.shards.baselines import SharedBaselines
from service.core.shards.shard import ShardSpec, StopLimits
from service.core.system.manifest import Manifest
from service.core.trial.engine import TrialEngine
from service.core.trial.target import Target

#: `service.core.shards.assay.run_shard`, handed in (the assay module imports this one).
RunShard = Callable[..., ShardResult]


def run_sequential(
    run_shard: RunShard,
    manifest: Manifest,
    plan: AssayPlan,
    target: Target | TrialEngine | None,
    progress: Callable[[int, int], None] | None,
    limits: StopLimits | None,
    honours_keys: bool,
    fault_done: Callable[[str, Tally, int, int], None] | None,
    meter: Meter,
    concurrency: int = 1,
    shared: SharedBaselines | None = None,
) -> AssayReport:
    """Each fault in one shard of at most `plan.trials` trials, ended by its rule (progress
    counts against the fixed plan's total). `shared`: the assay's shared baselines: a fault
    reads the runs the faults before it on its tool ran, and runs those they did not."""
    faults = plan.faults()
    total = plan.trials * len(faults)
    folded = ShardResult(-1, {}, 0)
    stops: dict[str, Stop] = {}
    stopped: str | None = None
    done = 0
    for i, spec in enumerate(faults):
        watch = Watch(rule_for(manifest, plan, spec))
        shard = ShardSpec(i, spec.id, 0, plan.trials)
        result = run_shard(
            manifest,
            plan,
            shard,
            None,
            target,
            limits=limits,
            honours_keys=honours_keys,
            concurrency=concurrency,
            watch=watch,
            meter=meter,
            shared=shared,
        )
        folded.trials += result.trials
        tally = result.tallies.get(spec.id) or Tally()
        folded.tallies[spec.id] = tally
        if watch.stop is not None:
            stops[spec.id] = watch.stop
        elif result.stop_reason is not None:
            stops[spec.id] = Stop("stopped", result.stop_reason, result.trials)
        done += plan.trials
        if progress is not None:
            progress(done, total)
        if fault_done is not None:
            fault_done(spec.id, tally, done, total)
        if result.stop_reason is not None:
            stopped = result.stop_reason
            break
        if limits is not None:
            limits = replace(
                limits,
                used_effects=limits.used_effects + result.effects,
                used_unsafe=limits.used_unsafe + result.unsafe,
                used_target_errors=limits.used_target_errors + tally.all_errors,
            )
    stop_views = {f: s.view() for f, s in stops.items()}
    return merge(manifest, plan, [folded], stopped, stop_views, meter.view("sequential"))
