"""One scheduler for every assay: the local assay, a worker's shards and its held shards, and
paper mode's shards (one work whose trials mix faults: a `FaultWork` without a fault of its
own, counted in its trial order). On a world that offers slots, the assay's work as units (one
arm of one trial: its intervention, its matched baseline, its counterfactual pairs) drawn by
every free slot from every work at once; on one slot, the serial run, in the caller's thread.

Faults run side by side, and a trial's arms run in different slots, so a fault with few trials, or
one its sequential rule stops early, never leaves slots idle while another fault has work left.
Each trial is folded into its fault in trial order (`InOrder`, one per fault) once all its arms
are in, its arms merged in the serial loop's order, and counted in the assay's trial order
(`service.core.shards.counting`), so a deterministic agent gives the same per-fault results at
any concurrency, stops included. No trial of a fault its rule has decided is started (the fault
is closed when the rule stops it), nor one the trials before it have already stopped. Budgets
admit each trial before it starts (`Counting.admit`).
"""

from __future__ import annotations

import gc
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Final

from service.core.evidence.spend import Meter
from service.core.evidence.tally import Tally
from service.core.faults.catalogue import Catalogue, FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards import arms
from service.core.shards.counting import (
    BASE,
    MAIN,
    PAIRS,
    Counting,
    FaultWork,
    StartedTrial,
    TrialDone,
)
from service.core.shards.shard import StopLimits
from service.core.shards.slotted import slot_threads
from service.core.system.manifest import Manifest
from service.core.trial.engine import SlottedEngine, TrialEngine
from service.core.trial.harness import Runtime
from service.core.trial.target import Target

__all__ = ["GC_YOUNG", "FaultWork", "TrialDone", "run_scheduled", "runtimes_of"]

#: Net allocations between young collections inside a serial run (CPython's default is 700).
GC_YOUNG: Final = 20_000

# A trial whose arms are all in, on its way from a slot to the fold; None: a slot has stopped.
_Done = tuple[FaultWork, StartedTrial] | None


def _run(
    work: FaultWork, tr: StartedTrial, part: int, rt: Runtime, tally: Tally, spent: Meter | None
) -> tuple[int, int, int, bool]:
    """Run one arm of a trial; return effects, unsafe escapes, target errors, and whether the
    trial's pairs may run (the intervention fired and was graded)."""
    t, spec = work.trial, tr.spec
    if part == MAIN:
        return arms.intervention(rt, spec, tally, t.base + tr.k, tr.wkey, tr.skey, spent)
    if part == BASE:
        effects, errors = arms.baseline(rt, spec, tally, tr.wkey, tr.skey, spent, t.shared, tr.k)
    else:
        rm = t.removals[spec.id]
        effects, errors = arms.pairs(rt, spec, tally, tr.wkey, tr.skey, rm, spent)
    return effects, 0, errors, False


def runtimes_of(
    manifest: Manifest,
    cat: Catalogue,
    target: Target | TrialEngine | SlottedEngine | None,
    slots: int,
    guard: Callable[[FaultSpec], str | None] | None = None,
    namespace: str | None = None,
    honours_keys: bool = True,
) -> list[Runtime]:
    """A runtime per slot: on one slot the target itself (a world with slots runs its serial
    trials as its own engine, as the serial loop always ran them), else each of the world's
    slots."""
    if slots == 1 and (isinstance(target, TrialEngine) or not isinstance(target, SlottedEngine)):
        return [Runtime(manifest, cat, target, guard, namespace, honours_keys)]
    assert isinstance(target, SlottedEngine)
    return [
        Runtime(manifest, cat, target.slot(i), guard, namespace, honours_keys) for i in range(slots)
    ]


def _serial(work: FaultWork, rt: Runtime, plan: AssayPlan, counter: Counting) -> None:
    """Run the fault's next trial on the one slot, its arms one after another straight into the
    fault's tally, and count it: at one slot nothing admitted is ever discarded (every stop
    before it was read as it was admitted), so its arms need no tallies of their own to merge.
    An arm that raises stops the run at once, as the serial loop does."""
    t, meter = work.trial, counter.meter
    k = work.taken
    work.taken += 1
    spec = work.spec_at(k)
    tally = work.tally if spec is work.spec else work.tally_of(spec)
    wkey, skey, extra = t.keys(k)
    pairs = True
    if work.watch is not None:
        pairs = work.watch.needs_pairs(tally)
        work.watch.steer(rt.engine, tally)
    # A trial's own spend when it is told per trial (a held shard keeps its share).
    spent = meter if meter is None or counter.trial_done is None else Meter(meter.clock)
    if spent is not None and spent is not meter:
        spent.trials = 1
    rm = t.removals[spec.id]
    out = arms.one_trial(
        rt, plan, spec, tally, t.base + k, wkey, skey, rm, extra, spent, pairs, t.shared, k
    )
    counter.counted(work, out, spent)


def run_scheduled(
    runtimes: list[Runtime],
    works: list[FaultWork],
    plan: AssayPlan,
    limits: StopLimits | None = None,
    meter: Meter | None = None,
    should_stop: Callable[[], bool] | None = None,
    batch: int = 50,
    fault_done: Callable[[FaultWork], None] | None = None,
    *,
    trial_done: TrialDone | None = None,
    more: Callable[[], list[FaultWork]] | None = None,
    ordered: bool = False,
) -> tuple[str | None, int, tuple[int, int, int]]:
    """Run `works` on one thread per slot; return the stop reason (None: every fault ran to
    its end or its rule's stop), the trials counted and what they showed (effects, unsafe
    escapes, target errors). Each fault's tally (a paper shard's: `tallies`), trials counted
    and rule are left on its `FaultWork`, and `cut` on the fault a stop was decided at;
    `fault_done(work)` is called (from this thread) as each fault finishes and is counted.
    `trial_done(work, spent, out)` is called (from this thread, under the scheduler's lock) for
    every trial as it is counted (`out`: its effects, unsafe escapes and target errors) or
    discarded (None); service.core.shards.held keeps each shard's own figures from it.

    `ordered`: the works are one assay's faults in plan order, counted in the serial run's
    order (every trial of the first, then of the next), so every stop — effects, unsafe
    escapes, target errors, a budget, an abort — falls at the serial run's trial whatever the
    concurrency, and `meter` (the trials counted) is the serial run's. Else each work is
    counted in its own trial order as its trials come (a worker's held shards), and `more()`
    is called (from this thread) as each work finishes while no stop is in force: the works
    it returns join the run (a worker holding more of an assay's shards as its held ones
    finish); it must not raise (an exception counts as nothing more, and it is not asked
    again), and the slots stop only once it has returned nothing with every work finished.

    A free slot first runs an arm of a trial already started (the trials in flight finish
    first), else starts the next trial of the open fault `Counting.admit` names, never one the
    trials folded before it have already stopped. Starting a trial readies its baseline for
    another slot; its pairs are readied when its intervention has fired. A trial is folded
    once all its arms are in, and counted once every trial before it is. A stop starts no arm
    at all, and what is not counted yet is discarded (what it spent is `past_stop`: the runs
    happened)."""
    counter = Counting(
        works,
        plan,
        limits,
        meter,
        should_stop,
        batch,
        trial_done,
        ordered,
        serial=len(runtimes) == 1,
    )
    if counter.stops.opening() is not None:
        return "aborted", 0, (0, 0, 0)
    return _Scheduler(runtimes, works, plan, meter, fault_done, more, ordered, counter).run()


class _Scheduler:
    """`run_scheduled`'s state, shared by the slots' draw and the fold (under `admitted`). A
    class, not closures: compiled, closures that call each other share an environment that
    holds them, a reference cycle left to the collector after every run."""

    def __init__(
        self,
        runtimes: list[Runtime],
        works: list[FaultWork],
        plan: AssayPlan,
        meter: Meter | None,
        fault_done: Callable[[FaultWork], None] | None,
        more: Callable[[], list[FaultWork]] | None,
        ordered: bool,
        counter: Counting,
    ) -> None:
        self.runtimes = runtimes
        self.works = works
        self.plan = plan
        self.meter = meter
        self.clock = None if meter is None else meter.clock
        self.fault_done = fault_done
        self.more = more
        self.ordered = ordered
        self.counter = counter
        self.inline = len(runtimes) == 1
        self.admitted = threading.Condition(threading.Lock())
        self.stop = counter.stopped
        self.finished: queue.SimpleQueue[_Done] = queue.SimpleQueue()
        self.ready: deque[tuple[FaultWork, StartedTrial, int]] = deque()
        # Trials started whose arms are not all in yet.
        self.live = 0
        # Set once `more` has nothing to add and every work is finished (at once without
        # `more`).
        self.exhausted = threading.Event()
        if more is None:
            self.exhausted.set()
        for work in works:
            # Ordered, a decided fault's rule reads its trials as folded, ahead of their count.
            if ordered and work.watch is not None and not self.inline:
                work.seen = Tally()

    def run(self) -> tuple[str | None, int, tuple[int, int, int]]:
        counter = self.counter
        if self.inline:
            # The caller's thread is the one slot: the serial run (`_serial`). A trial's objects
            # are freed by reference counting (the harness leaves no cycles), so the cyclic
            # collector's young passes, every 700 allocations by default, only re-walk the live
            # trial: a sixth of the loop's CPU. Inside the loop they run rarely; after it, as
            # before.
            thresholds = gc.get_threshold()
            gc.set_threshold(GC_YOUNG, thresholds[1], thresholds[2])
            try:
                self.serial()
            finally:
                gc.set_threshold(*thresholds)
        else:
            for work, tr in slot_threads(self.runtimes, self.slot, self.finished):
                self.collect(work, tr)
        counter.sweep()
        if counter.failure is not None:
            raise counter.failure
        out = counter.out
        return counter.reason, counter.done, (out[0], out[1], out[2])

    def settle(self, work: FaultWork, tr: StartedTrial) -> None:
        # Under the lock: one of the trial's arms is in (or will never run).
        tr.left -= 1
        if tr.left == 0 and not tr.sent:
            tr.sent = True
            self.live -= 1
            self.finished.put((work, tr))
            self.admitted.notify_all()

    def take(self, rt: Runtime) -> tuple[FaultWork, StartedTrial, int] | None:
        # Under the lock: start the next trial of an open fault, if the stops admit one.
        work = self.counter.admit([w for w in self.works if w.open()])
        if work is None:
            return None
        k = work.taken
        work.taken += 1
        work.in_flight += 1
        self.live += 1
        wkey, skey, extra = work.trial.keys(k)
        pairs = True
        if work.watch is not None:
            # What the trial runs is read from the fault's trials folded so far.
            rule = work.seen if work.seen is not None else work.tally
            pairs = work.watch.needs_pairs(rule)
            work.watch.steer(rt.engine, rule)
        tr = StartedTrial(k, work.spec_at(k), wkey, skey, extra, pairs)
        if extra and self.plan.matched_baseline:
            tr.left += 1
            self.ready.append((work, tr, BASE))
            self.admitted.notify_all()
        return work, tr, MAIN

    def draw(self, rt: Runtime) -> tuple[FaultWork, StartedTrial, int] | None:
        ready, stop = self.ready, self.stop
        with self.admitted:
            while True:
                while ready:
                    work, tr, part = ready.popleft()
                    if tr.exc is None and not stop.is_set():
                        return work, tr, part
                    self.settle(work, tr)  # its trial is discarded: the arm never runs
                if stop.is_set():
                    return None
                job = self.take(rt)
                if job is not None:
                    return job
                if (
                    self.live == 0
                    and self.exhausted.is_set()
                    and not any(w.left() for w in self.works)
                ):
                    return None
                # An arm may yet be readied, a fault held to its window may yet open.
                self.admitted.wait(0.05)

    def arm(self, rt: Runtime, work: FaultWork, tr: StartedTrial, part: int) -> None:
        tally = Tally()
        spent = None if self.meter is None else Meter(self.clock)
        if spent is not None and part == MAIN:
            spent.trials = 1
        exc: BaseException | None = None
        out = (0, 0, 0, False)
        try:
            out = _run(work, tr, part, rt, tally, spent)
        except BaseException as raised:  # re-raised by the scheduler, in trial order
            exc = raised
        with self.admitted:
            tr.tallies[part], tr.spent[part] = tally, spent
            if exc is not None:
                tr.exc = tr.exc or exc
            else:
                for i in range(3):
                    tr.out[i] += out[i]
            due = out[3] and tr.extra and tr.pairs and self.plan.counterfactuals
            if due and tr.exc is None and not self.stop.is_set():
                tr.left += 1
                self.ready.append((work, tr, PAIRS))
                self.admitted.notify_all()
            self.settle(work, tr)

    def slot(self, rt: Runtime) -> None:
        try:
            while (job := self.draw(rt)) is not None:
                work, tr, part = job
                self.arm(rt, work, tr, part)
        finally:
            self.finished.put(None)

    def collect(self, work: FaultWork, tr: StartedTrial) -> None:
        # A trial whose arms are all in: folded in its fault's order, counted in the run's.
        counter = self.counter
        work.order.put(tr.k, tr)
        ended: list[FaultWork] = []
        with self.admitted:
            for _k, done in work.order.ready():
                work.in_flight -= 1
                counter.fold(work, done)
                ended += counter.count(work)
            if not self.ordered and work.finished() and not self.stop.is_set():
                ended.append(work)
            self.admitted.notify_all()
        self.close(ended)

    def close(self, ended: list[FaultWork]) -> None:
        # The works `ended` are finished and counted: told, and more asked for.
        works, stop = self.works, self.stop
        for w in ended:
            if w.reported:
                continue
            w.reported = True
            if self.fault_done is not None:
                self.fault_done(w)
            if not self.exhausted.is_set():
                added: list[FaultWork] = []
                if not stop.is_set():
                    try:
                        added = self.more() if self.more is not None else []
                    except Exception:  # nothing more: the works held finish as they are
                        self.more = None
                with self.admitted:
                    works.extend(added)
                    if stop.is_set() or (not added and all(w.finished() for w in works)):
                        self.exhausted.set()
                    self.admitted.notify_all()

    def serial(self) -> None:
        counter, works, stop, plan = self.counter, self.works, self.stop, self.plan
        rt = self.runtimes[0]
        # Without an abort to ask or a budget to read, the stops admit every next trial.
        asks = counter.stops.should_stop is not None or counter.stops.budget
        due: FaultWork | None = None
        while not stop.is_set():
            # Every trial started is counted: the next is the first open fault's (the counting
            # order's), if the stops admit it.
            if due is None or due.closed or due.taken >= due.stop:
                due = next((w for w in works if w.open()), None)
                if due is None:
                    break
            if asks and counter.admit([due]) is None:
                break
            _serial(due, rt, plan, counter)
            # Nothing waits to be counted here: only a fault's end moves the counting on.
            if (due.closed or due.taken >= due.stop) and not stop.is_set():
                self.close(counter.count(due) if self.ordered else [due])
