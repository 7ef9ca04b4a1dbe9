"""One scheduler for an assay on a world that offers slots: the assay's work as units (one arm of
one fault's trial: its intervention, its matched baseline, its counterfactual pairs) drawn by every
free slot from every fault at once.

Faults run side by side, and a trial's arms run in different slots, so a fault with few trials, or
one its sequential rule stops early, never leaves slots idle while another fault has work left.
Each trial is folded into its fault's tally in trial order (`InOrder`, one per fault) once all its
arms are in, its arms merged in the serial loop's order, so a deterministic agent gives the same
per-fault results at any concurrency. No trial of a fault its rule has decided is started (the
fault is closed when the rule stops it); one already running finishes and counts, and the rule is
read again (`Watch.recount`), so a violation it shows is never dropped. Budgets admit each trial
before it starts (`Meter.refuses`). A stop condition that blocks (effects, unsafe escapes, target
errors, an abort) starts no further arm and discards what has not been folded yet.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable

from service.core.evidence.spend import KEEPS_FINISHED, Meter, budgeted
from service.core.evidence.stopping import Watch
from service.core.evidence.tally import Tally
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards import arms
from service.core.shards.shard import StopLimits
from service.core.shards.slots import InOrder
from service.core.shards.slotted import SlotTrial
from service.core.trial.harness import Runtime

__all__ = ["FaultWork", "TrialDone", "run_scheduled"]


class FaultWork:
    """One fault's share of the scheduler: its trials to hand out, its fold order and tally,
    its rule (a sequential plan's `Watch`), and whether it is closed (decided: no unit of it
    starts)."""

    __slots__ = (
        "closed",
        "done",
        "in_flight",
        "index",
        "order",
        "reported",
        "spec",
        "start",
        "stop",
        "taken",
        "tally",
        "trial",
        "trials",
        "watch",
        "window",
    )

    def __init__(
        self,
        index: int,
        spec: FaultSpec,
        trial: SlotTrial,
        trials: int,
        watch: Watch | None,
        window: int | None = None,
        start: int = 0,
    ) -> None:
        """Trials `start` to `start + trials` of the fault (a shard's range: trial numbers, and
        so streams, are the fault's). `window`: trials of the fault in flight at most (None:
        any)."""
        self.index = index
        self.window = window
        self.spec = spec
        self.trial = trial
        self.trials = trials
        self.watch = watch
        self.start = start
        self.stop = start + trials
        self.taken = start
        self.in_flight = 0
        self.done = 0
        self.closed = False
        self.reported = False
        self.tally = Tally()
        self.order: InOrder[_Trial] = InOrder(start)

    def open(self) -> bool:
        """Whether a free slot may start the fault's next unit."""
        if self.window is not None and self.in_flight >= self.window:
            return False
        return self.left()

    def left(self) -> bool:
        """Whether the fault may still start a unit (now or once its units in flight fold)."""
        return not self.closed and self.taken < self.stop

    def finished(self) -> bool:
        return (self.closed or self.taken >= self.stop) and self.in_flight == 0


#: A trial's arms as units: the intervention (with its sensitivity run), its matched baseline, and
#: its counterfactual pairs (ready once the intervention fired and was graded). Merged in this
#: order, their tallies are the serial loop's.
_MAIN, _BASE, _PAIRS = 0, 1, 2


class _Trial:
    """One trial in flight: its keys, what its arms run, their results until every arm is in,
    and how many arms are still to run or running (`left`)."""

    __slots__ = (
        "exc",
        "extra",
        "k",
        "left",
        "out",
        "pairs",
        "sent",
        "skey",
        "spent",
        "tallies",
        "wkey",
    )

    def __init__(self, k: int, wkey: int, skey: int, extra: bool, pairs: bool) -> None:
        self.k = k
        self.wkey = wkey
        self.skey = skey
        self.extra = extra
        self.pairs = pairs
        self.left = 1
        self.tallies: list[Tally | None] = [None, None, None]
        self.spent: list[Meter | None] = [None, None, None]
        self.out = [0, 0, 0]  # effects, unsafe escapes, target errors
        self.exc: BaseException | None = None
        self.sent = False

    def tally(self) -> Tally:
        """The trial's arms merged, in the serial loop's order."""
        merged = self.tallies[_MAIN]
        assert merged is not None  # the intervention always runs first
        for part in (_BASE, _PAIRS):
            theirs = self.tallies[part]
            if theirs is not None:
                merged.merge(theirs)
        return merged


#: What `run_scheduled` tells of each trial it releases: its fault, what its arms spent, and its
#: (effects, unsafe escapes, target errors) when folded (None: discarded).
TrialDone = Callable[[FaultWork, tuple[Meter | None, ...], tuple[int, int, int] | None], None]

# A trial whose arms are all in, on its way from a slot to the fold; None: a slot has stopped.
_Done = tuple[FaultWork, _Trial] | None


def _run(
    work: FaultWork, tr: _Trial, part: int, rt: Runtime, tally: Tally, spent: Meter | None
) -> tuple[int, int, int, bool]:
    """Run one arm of a trial; return effects, unsafe escapes, target errors, and whether the
    trial's pairs may run (the intervention fired and was graded)."""
    t, spec = work.trial, work.spec
    if part == _MAIN:
        return arms.intervention(rt, spec, tally, t.base + tr.k, tr.wkey, tr.skey, spent)
    if part == _BASE:
        effects, errors = arms.baseline(rt, spec, tally, tr.wkey, tr.skey, spent)
    else:
        rm = t.removals[spec.id]
        effects, errors = arms.pairs(rt, spec, tally, tr.wkey, tr.skey, rm, spent)
    return effects, 0, errors, False


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
) -> tuple[str | None, int]:
    """Run `works` on one thread per slot; return the stop reason (None: every fault ran to
    its end or its rule's stop) and the trials folded. Each fault's tally, trials done and rule
    are left on its `FaultWork`; `fault_done(work)` is called (from this thread) as each fault
    finishes. `trial_done(work, spent, out)` is called (from this thread) for every trial of a
    fault, in trial order, as the meter takes what its arms spent: `out` is its (effects, unsafe
    escapes, target errors) when it is folded, None when it is discarded (service.core.shards.held
    keeps each shard's own figures from it). `more()` is called (from this thread) as each fault
    finishes while no stop is in force: the works it returns join the run (a worker holding more
    of an assay's shards as its held ones finish); it must not raise (an exception counts as
    nothing more, and it is not asked again), and the slots stop only once it has returned
    nothing with every work finished.

    A free slot first runs an arm of a trial already started (the trials in flight finish
    first), else starts the next trial of the open fault with the fewest trials in flight (then
    the first in the plan), so slots spread over the faults. Starting a trial admits it against
    the budgets and readies its baseline for another slot; its pairs are readied when its
    intervention has fired. A trial is folded once all its arms are in.

    Two stops: `halt` starts no new trial (a budget, or a stop whose finished trials still
    count: the arms of trials in flight run and count); `drop` (a stop that blocks: effects,
    unsafe escapes, target errors, an abort, an arm that raised) starts no arm at all, and what
    is not folded yet is discarded, though what it spent is counted: the runs happened.

    Over 60 lines on purpose: the slots' draw and the fold share the scheduler's state."""
    lock = threading.Lock()
    admitted = threading.Condition(lock)
    halt, drop = threading.Event(), threading.Event()
    finished: queue.SimpleQueue[_Done] = queue.SimpleQueue()
    ready: deque[tuple[FaultWork, _Trial, int]] = deque()
    budget = meter is not None and budgeted(plan.stop)
    clock = None if meter is None else meter.clock
    # Trials started and trials whose spend the meter holds: the difference is in flight. And
    # trials started whose arms are not all in yet.
    counts = [0, 0]
    live = [0]
    refused: list[str | None] = [None]
    # Set once `more` has nothing to add and every work is finished (at once without `more`).
    exhausted = threading.Event()
    if more is None:
        exhausted.set()

    def settle(work: FaultWork, tr: _Trial) -> None:
        # Under the lock: one of the trial's arms is in (or will never run).
        tr.left -= 1
        if tr.left == 0 and not tr.sent:
            tr.sent = True
            live[0] -= 1
            finished.put((work, tr))
            admitted.notify_all()

    def take(rt: Runtime) -> tuple[FaultWork, _Trial, int] | None:
        # Under the lock: start the next trial of an open fault, if a budget admits one.
        if budget and meter is not None:
            in_flight = counts[0] - counts[1]
            if meter.waits(plan.stop, in_flight):
                return None
            no = meter.refuses(plan.stop, in_flight)
            if no is not None:
                refused[0] = no
                halt.set()
                admitted.notify_all()
                return None
        candidates = [w for w in works if w.open()]
        if not candidates:
            return None
        work = min(candidates, key=lambda w: (w.in_flight, w.index))
        k = work.taken
        work.taken += 1
        work.in_flight += 1
        counts[0] += 1
        live[0] += 1
        wkey, skey, extra = work.trial.keys(k)
        pairs = True
        if work.watch is not None:
            # What the trial runs is read from the trials folded so far.
            pairs = work.watch.needs_pairs(work.tally)
            work.watch.steer(rt.engine, work.tally)
        tr = _Trial(k, wkey, skey, extra, pairs)
        if extra and plan.matched_baseline:
            tr.left += 1
            ready.append((work, tr, _BASE))
            admitted.notify_all()
        return work, tr, _MAIN

    def draw(rt: Runtime) -> tuple[FaultWork, _Trial, int] | None:
        with admitted:
            while True:
                while ready:
                    work, tr, part = ready.popleft()
                    if tr.exc is None and not drop.is_set():
                        return work, tr, part
                    settle(work, tr)  # its trial is discarded: the arm never runs
                if drop.is_set():
                    return None
                if not halt.is_set():
                    job = take(rt)
                    if job is not None:
                        return job
                if live[0] == 0 and (
                    halt.is_set() or (exhausted.is_set() and not any(w.left() for w in works))
                ):
                    return None
                # An arm may yet be readied, a fault held to its window may yet open.
                admitted.wait(0.05)

    def slot(rt: Runtime) -> None:
        try:
            while (job := draw(rt)) is not None:
                work, tr, part = job
                tally = Tally()
                spent = None if meter is None else Meter(clock)
                if spent is not None and part == _MAIN:
                    spent.trials = 1
                exc: BaseException | None = None
                out = (0, 0, 0, False)
                try:
                    out = _run(work, tr, part, rt, tally, spent)
                except BaseException as raised:  # re-raised by the scheduler, in trial order
                    exc = raised
                with admitted:
                    tr.tallies[part], tr.spent[part] = tally, spent
                    if exc is not None:
                        tr.exc = tr.exc or exc
                    else:
                        for i in range(3):
                            tr.out[i] += out[i]
                    due = out[3] and tr.extra and tr.pairs and plan.counterfactuals
                    if due and tr.exc is None and not drop.is_set():
                        tr.left += 1
                        ready.append((work, tr, _PAIRS))
                        admitted.notify_all()
                    settle(work, tr)
        finally:
            finished.put(None)

    effects = unsafe = target_errors = done = 0
    reason: str | None = None
    failure: BaseException | None = None
    keep = False  # the stop lets finished trials still count (a budget)
    if should_stop is not None and should_stop():
        return "aborted", 0
    threads = [threading.Thread(target=slot, args=(rt,), daemon=True) for rt in runtimes]
    for th in threads:
        th.start()
    running = len(threads)
    while running:
        item = finished.get()
        if item is None:
            running -= 1
            continue
        work, tr = item
        work.order.put(tr.k, tr)
        for _k, tr in work.order.ready():
            with admitted:
                work.in_flight -= 1
                if meter is not None:
                    for spent in tr.spent:
                        if spent is not None:
                            meter.absorb(spent)
                    counts[1] += 1
                admitted.notify_all()
            if trial_done is not None:
                # Only this thread drops: what the checks below decide is decided now.
                kept = not drop.is_set() and tr.exc is None
                trial_done(
                    work, tuple(tr.spent), (tr.out[0], tr.out[1], tr.out[2]) if kept else None
                )
            if refused[0] is not None and reason is None and not keep:
                # A budget refused the next trial: those running finish and count.
                reason, keep = refused[0], True
            if drop.is_set():
                continue
            if tr.exc is not None:
                if not keep:
                    failure = tr.exc
                    with admitted:
                        halt.set()
                        drop.set()
                        admitted.notify_all()
                continue
            with lock:
                work.tally.merge(tr.tally())
            effects += tr.out[0]
            unsafe += tr.out[1]
            target_errors += tr.out[2]
            work.done += 1
            done += 1
            if work.closed and work.watch is not None:
                work.watch.recount(work.tally, work.done)
            if keep:
                if work.watch is not None and not work.closed:
                    work.watch.recount(work.tally, work.done)
                continue
            if limits is not None:
                reason = limits.tripped(effects, unsafe, target_errors)
            if reason is None and budget and meter is not None:
                reason = meter.exceeded(plan.stop)
            if reason is None and should_stop is not None and done % batch == 0 and should_stop():
                reason = "aborted"
            if reason is not None:
                keep = reason.startswith(KEEPS_FINISHED)
                with admitted:
                    halt.set()
                    if not keep:
                        drop.set()
                    admitted.notify_all()
            elif (
                not work.closed
                and work.watch is not None
                and work.watch.done(work.tally, work.done)
            ):
                with admitted:
                    work.closed = True
                    admitted.notify_all()
        if not work.reported and work.finished():
            work.reported = True
            if fault_done is not None:
                fault_done(work)
            if not exhausted.is_set():
                added: list[FaultWork] = []
                if not halt.is_set():
                    try:
                        added = more() if more is not None else []
                    except Exception:  # nothing more: the works held finish as they are
                        more = None
                with admitted:
                    works.extend(added)
                    if halt.is_set() or (not added and all(w.finished() for w in works)):
                        exhausted.set()
                    admitted.notify_all()
    for th in threads:
        th.join()
    if failure is not None:
        raise failure
    if reason is None and refused[0] is not None:
        reason = refused[0]
    return reason, done
