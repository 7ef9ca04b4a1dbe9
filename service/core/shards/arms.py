"""A trial's arms, each run on its own: the intervention (with the sensitivity pair's naive run,
which reads it), the matched baseline, and the counterfactual pairs (which run only when the
intervention fired and was graded).

`one_trial` runs them one after another into one tally (the serial loop, a paper shard's slots);
the scheduler (`service.core.shards.scheduler`) runs them in different slots, each into a tally of
its own, and merges the three in this order, which gives the serial loop's tally exactly: counts
add, and only the intervention keeps samples.

Every trial is graded from the world. A target error hides nothing: when the world shows a
violation the trial counts as graded evidence (damage beats error); only a clean world makes it a
bare target error. A fault that never fired is still graded (never fired is not clean).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from service.core.evidence.pairs import Removal
from service.core.evidence.spend import Meter
from service.core.evidence.tally import SAMPLES, Tally, violating
from service.core.faults.catalogue import FaultSpec, baseline_group
from service.core.faults.plan import AssayPlan
from service.core.shards.baselines import SharedBaselines, spend_key
from service.core.trial.engine import MatchedEngine
from service.core.trial.harness import Runtime, run_trial
from service.core.trial.oracle import FLAG_INDEX, Flag
from service.core.trial.record import TrialRecord

__all__ = ["baseline", "intervention", "pairs", "sample"]

_UNSAFE_ESCAPE: Final = FLAG_INDEX[Flag.UNSAFE_ESCAPE]


def intervention(
    rt: Runtime,
    spec: FaultSpec,
    tally: Tally,
    trial: int,
    wkey: int,
    skey: int,
    meter: Meter | None,
) -> tuple[int, int, int, bool]:
    """Run the fault's arm into the tally; return its effects, unsafe escapes (0 or 1), target
    errors (0 or 1), and whether its counterfactual pairs may run (it fired and was graded)."""
    tally.planned += 1
    if meter is not None:
        meter.mark()
    rec = run_trial(rt, spec, wkey, skey)
    if meter is not None:
        meter.add(spec.id, "intervention", 1, rec.usage, rec.usage_invalid)
        if rec.sensitivity is not None:
            meter.add(spec.id, "sensitivity", 1, (0, 0.0))
    tally.sandbox_refusals += len(rec.world.refusals)
    tally.injector_refusals += len(rec.refusals)
    if rec.builds:
        tally.saw(rec.builds)
    flags = rec.outcome.flags
    damaged = violating(flags)
    errors = 0
    if rec.target_error is not None:
        tally.target_errors += 1
        tally.error(rec.target_error)
        errors = 1
    graded = rec.target_error is None or damaged
    if not rec.exercised:
        tally.not_exercised += 1
        if graded:
            tally.add_outcome("unfired", rec)
    elif graded:
        tally.exercised += 1
        tally.add_outcome("intervention", rec)
        if rec.sensitivity is not None:
            tally.add_flags("sensitivity", rec.sensitivity)
        if rec.storm is not None:
            tally.storm.add(rec.storm)
    if graded and (len(tally.samples) < SAMPLES or (damaged and tally.first_violation is None)):
        kept = sample(rec, trial)
        if len(tally.samples) < SAMPLES:
            tally.samples.append(kept)
        if damaged and tally.first_violation is None:
            tally.first_violation = kept
    unsafe = int(graded and flags[_UNSAFE_ESCAPE])
    return rec.outcome.effects, unsafe, errors, rec.exercised and graded


def baseline(
    rt: Runtime,
    spec: FaultSpec,
    tally: Tally,
    wkey: int,
    skey: int,
    meter: Meter | None,
    shared: SharedBaselines | None = None,
    k: int = 0,
) -> tuple[int, int]:
    """Run the matched baseline (the trial's workload with nothing armed) into the tally; return
    its effects and target errors (0 or 1). An engine that resets its world for the fault's tool
    is told which fault the baseline is matched to, wherever the intervention ran. `shared`: the
    faults on the tool share trial `k`'s baseline (`service.core.shards.baselines`): it runs
    once, spent under the tool, and every fault reads its record, its violations included."""
    group = baseline_group(spec) if shared is not None else None
    run = None
    if shared is not None and group is not None:
        run, mine = shared.claim(group, k)
        if not mine:
            base = shared.wait(run)
            return _read_baseline(spec, tally, base, base.reaches)
    try:
        if meter is not None:
            meter.mark()
        engine = rt.engine
        if engine is not None and isinstance(engine, MatchedEngine):
            engine.match(wkey, spec)
        base = run_trial(rt, None, wkey, skey)
    except BaseException as exc:
        if run is not None:
            SharedBaselines.settle(run, None, exc)
        raise
    if run is not None:
        SharedBaselines.settle(run, base, None)
    if meter is not None:
        owner = spec.id if group is None else spend_key(group)
        meter.add(owner, "baseline", 1, base.usage, base.usage_invalid)
    return _read_baseline(spec, tally, base, None)


def _read_baseline(
    spec: FaultSpec, tally: Tally, base: TrialRecord, reaches: Callable[[FaultSpec], bool] | None
) -> tuple[int, int]:
    """A baseline's record into a fault's tally; `reaches`: whether the run's calls reach this
    fault (a shared run was matched to another fault on the tool)."""
    if base.builds:
        tally.saw(base.builds)
    errors = 0
    if base.target_error is not None:
        tally.baseline_errors += 1
        tally.error(base.target_error)
        errors = 1
    elif base.reachable is not None:
        tally.baseline_reach += 1
        tally.baseline_reached += base.reachable if reaches is None else reaches(spec)
    if base.target_error is None or violating(base.outcome.flags):
        tally.add_outcome("baseline", base)
    return base.outcome.effects, errors


def pairs(
    rt: Runtime,
    spec: FaultSpec,
    tally: Tally,
    wkey: int,
    skey: int,
    rm: Removal,
    meter: Meter | None,
) -> tuple[int, int]:
    """Run the counterfactual pairs (the fault with each control removed) into the tally; return
    their effects and target errors."""
    effects = errors = 0
    if meter is not None:
        meter.mark()
    for arm, removed in rm.pairs():
        cf = run_trial(rt, spec, wkey, skey, removed)
        if meter is not None:
            meter.add(spec.id, arm, 1, cf.usage, cf.usage_invalid)
        effects += cf.outcome.effects
        if cf.builds:
            tally.saw(cf.builds)
        tally.counterfactual_runs += 1
        if cf.target_error is not None:
            tally.counterfactual_errors += 1
            tally.error(cf.target_error)
            errors += 1
        if not cf.exercised:
            # A pair that never meets the fault cannot show what the control does.
            tally.counterfactual_unfired += 1
        elif cf.target_error is None or violating(cf.outcome.flags):
            tally.add_outcome(arm, cf)
    return effects, errors


def sample(rec: TrialRecord, trial: int) -> dict[str, Any]:
    """What a report keeps of a graded trial: its calls (an engine's own sample) or its world."""
    if rec.sample is not None:
        return {"trial": trial, **rec.sample, "outcome": rec.outcome.view()}
    world = rec.world
    return {
        "trial": trial,
        "injections": [r.view() for r in rec.receipts],
        "ledger": [e.view() for e in world.ledger],
        "evidence": [r.view() for r in world.evidence],
        "claim": world.claims[-1].view() if world.claims else None,
        "claims": [c.view() for c in world.claims],
        "target_error": rec.target_error,
        "outcome": rec.outcome.view(),
    }


def one_trial(
    rt: Runtime,
    plan: AssayPlan,
    spec: FaultSpec,
    tally: Tally,
    trial: int,
    wkey: int,
    skey: int,
    rm: Removal,
    extra: bool = True,
    meter: Meter | None = None,
    needs_pairs: bool = True,
    shared: SharedBaselines | None = None,
    k: int = 0,
) -> tuple[int, int, int]:
    """Run one trial's arms into the tally, one after another (the serial loop, and each slot
    of a paper shard); return effects, unsafe escapes and target errors. `extra`: the trial is
    in the plan's evidence sample (its matched baseline and pairs run); `needs_pairs`: a
    sequential rule still needs the counterfactual pairs. The matched baseline always runs on
    every trial of the sample (`shared`: once for the faults on the tool, at the fault's trial
    `k`)."""
    effects, unsafe, errors, fired = intervention(rt, spec, tally, trial, wkey, skey, meter)
    if extra and plan.matched_baseline:
        e, te = baseline(rt, spec, tally, wkey, skey, meter, shared, k)
        effects += e
        errors += te
    if extra and needs_pairs and plan.counterfactuals and fired:
        e, te = pairs(rt, spec, tally, wkey, skey, rm, meter)
        effects += e
        errors += te
    return effects, unsafe, errors
