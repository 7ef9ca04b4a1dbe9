"""Shards held together: several shards of one assay (each a range of one fault's trials) run at
once by the one scheduler (`service.core.shards.scheduler`), one `FaultWork` per shard, so a
worker's free slots draw from every shard it holds instead of idling behind one.

Each shard is folded and counted on its own, in its own trial order, so its tallies, trials,
effects, unsafe escapes and spend are exactly what `run_shard` gives for it alone. The stop
conditions and budgets are read over every held shard together as their trials are counted (one
meter, seeded by the caller with what stored shards already spent), so a stop applies to each held
shard still running, as it would to shards run one after another. A shard that finishes is
handed back at once (`shard_done`), never held back by a slower one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from service.core.evidence.pairs import removal
from service.core.evidence.spend import Meter
from service.core.evidence.stopping import Watch
from service.core.evidence.tally import ShardResult
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards.baselines import SharedBaselines
from service.core.shards.counting import fault_work
from service.core.shards.scheduler import FaultWork, run_scheduled, runtimes_of
from service.core.shards.shard import (
    ShardSpec,
    StopLimits,
    Stops,
    with_first_cause,
)
from service.core.system.manifest import Manifest
from service.core.trial.engine import SlottedEngine, TrialEngine
from service.core.trial.target import Target

__all__ = ["Done", "run_held"]

#: A finished shard and what its runs spent (None when the run was not metered).
Done = tuple[ShardResult, Meter | None]


class _Kept:
    """One shard's own share of the run, from the scheduler's word on each of its trials: what
    its counted trials showed (effects, unsafe escapes, target errors) and spent (the one
    meter's share that is this shard's; a trial discarded past a stop is not evidence, and what
    it spent is the meter's `past_stop`)."""

    def __init__(self, clock: Callable[[], float] | None) -> None:
        self.out = [0, 0, 0]
        self.spent = Meter(clock)


def run_held(
    manifest: Manifest,
    plan: AssayPlan,
    held: Sequence[tuple[ShardSpec, Watch | None]],
    target: SlottedEngine | Target | TrialEngine | None,
    slots: int,
    *,
    should_stop: Callable[[], bool] | None = None,
    batch: int = 50,
    limits: StopLimits | None = None,
    guard: Callable[[FaultSpec], str | None] | None = None,
    namespace: str | None = None,
    honours_keys: bool = True,
    meter: Meter | None = None,
    shard_done: Callable[[ShardResult, Meter | None], None] | None = None,
    more: Callable[[], Sequence[tuple[ShardSpec, Watch | None]]] | None = None,
    shared: SharedBaselines | None = None,
) -> list[Done]:
    """Run the `held` shards (each with its sequential rule's watch, or None) on `slots` slots of
    `target` (one slot: the target itself, whatever it is: the serial run); return each shard's
    result and spend, in the order held. `shard_done(result, spent)` is called (from the
    scheduler's thread) as each shard finishes: its trials all counted, or its rule decided,
    with no blocking stop in force; shards a stop ended are handed back with its reason once
    every slot has stopped. The other arguments are `run_shard`'s; each shard must name a fault
    (paper mode mixes faults within a trial range). `more()`, asked as each shard finishes while
    no stop is in force, returns further shards to hold (begun by the caller), which join the
    run and the result. `shared`: the assay's shared baselines (None: the held shards share
    theirs among themselves, under a plan that shares)."""
    cat = plan.resolve_catalogue()
    faults = plan.faults()
    position = {f.id: i for i, f in enumerate(faults)}
    removals = {f.id: removal(manifest, f) for f in faults}
    baselines = shared
    if baselines is None and plan.baseline == "shared":
        baselines = SharedBaselines()
    works: list[FaultWork] = []
    holding: list[ShardSpec] = []
    kept: list[_Kept] = []

    def hold(shard: ShardSpec, watch: Watch | None) -> FaultWork:
        if shard.fault_id is None:
            raise ValueError("a paper-mode shard cannot be held with others")
        spec = cat.by_id(shard.fault_id)
        trials = shard.stop - shard.start
        pos = len(holding)
        holding.append(shard)
        kept.append(_Kept(None if meter is None else meter.clock))
        place = position[spec.id]
        return fault_work(pos, plan, spec, place, removals, watch, trials, shard.start, baselines)

    works.extend(hold(shard, watch) for shard, watch in held)

    def joined() -> list[FaultWork]:
        # The scheduler adds them to `works`, in this order, as `hold` numbered them.
        return [] if more is None else [hold(shard, watch) for shard, watch in more()]

    runtimes = runtimes_of(manifest, cat, target, slots, guard, namespace, honours_keys)
    # Read over every held shard's counted trials (the scheduler reads its own).
    stops = Stops(plan.stop, limits, meter, should_stop, batch)
    results: dict[int, Done] = {}

    def report(work: FaultWork, reason: str | None) -> None:
        shard = holding[work.index]
        effects, unsafe, _errors = kept[work.index].out
        tallies = dict(work.tallies) if work.done else {}
        if reason is not None:
            reason = with_first_cause(reason, [work.tally, *(w.tally for w in works)])
        result = ShardResult(
            shard.index, tallies, work.done, reason is not None, reason, effects, unsafe
        )
        spent = None if meter is None else kept[work.index].spent
        results[work.index] = (result, spent)
        if shard_done is not None:
            shard_done(result, spent)

    def blocked() -> bool:
        """Whether a stop is in force over every held shard's counted trials so far (the
        scheduler's own stop is not visible here; read again, it is the same)."""
        totals = [sum(k.out[i] for k in kept) for i in range(3)]
        return stops.after(totals[0], totals[1], totals[2]) is not None

    def finished(work: FaultWork) -> None:
        # Ended by its own trials or rule, not cut short: stored now. A stop's shards wait for
        # the stop's reason.
        if (work.closed or work.done == work.trials) and not blocked():
            report(work, None)

    def trial_done(
        work: FaultWork, spent: tuple[Meter | None, ...], out: tuple[int, int, int] | None
    ) -> None:
        if out is None:
            return
        mine = kept[work.index]
        for arm in spent:
            if arm is not None:
                mine.spent.absorb(arm)
        for i in range(3):
            mine.out[i] += out[i]

    reason, _, _ = run_scheduled(
        runtimes,
        works,
        plan,
        limits,
        meter,
        should_stop,
        batch,
        fault_done=finished,
        trial_done=trial_done,
        more=None if more is None else joined,
    )
    reason = stops.settled(reason)
    for work in works:
        if work.index not in results:
            report(work, reason)
    return [results[i] for i in range(len(works))]
