"""One scheduler for an assay on a world that offers slots: the assay's work as units (one
fault's trial: its arms, run in one slot) drawn by every free slot from every fault at once.

Faults run side by side, so a fault with few trials, or one its sequential rule stops early, never
leaves slots idle while another fault has trials left. Each unit is folded into its fault's tally
in trial order (`InOrder`, one per fault), so a deterministic agent gives the same per-fault
results at any concurrency. A unit of a fault its rule has decided is never started (the fault is
closed when the rule stops it); one already running finishes and counts, and the rule is read
again (`Watch.recount`), so a violation it shows is never dropped. Budgets admit each unit before
it starts (`Meter.refuses`). A stop condition that blocks (effects, unsafe escapes, target errors,
an abort) discards what has not been folded yet, as `run_slotted` does.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from service.core.evidence.spend import KEEPS_FINISHED, Meter, budgeted
from service.core.evidence.stopping import Watch
from service.core.evidence.tally import Tally
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards.shard import StopLimits
from service.core.shards.slots import InOrder
from service.core.shards.slotted import SlotTrial
from service.core.trial.harness import Runtime

__all__ = ["FaultWork", "run_scheduled"]


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
        self.order: InOrder[_Result] = InOrder(start)

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


# A unit's result: its own tally, (effects, unsafe, target errors) or the exception it raised,
# and what it spent.
_Result = tuple[Tally, tuple[int, int, int] | None, BaseException | None, Meter | None]
# A finished unit on its way from a slot: its fault, trial number and result; None: a slot
# has stopped.
_Done = tuple[FaultWork, int, _Result] | None


def run_scheduled(
    runtimes: list[Runtime],
    works: list[FaultWork],
    plan: AssayPlan,
    limits: StopLimits | None = None,
    meter: Meter | None = None,
    should_stop: Callable[[], bool] | None = None,
    batch: int = 50,
    fault_done: Callable[[FaultWork], None] | None = None,
) -> tuple[str | None, int]:
    """Run `works` on one thread per slot; return the stop reason (None: every fault ran to
    its end or its rule's stop) and the trials folded. Each fault's tally, trials done and rule
    are left on its `FaultWork`; `fault_done(work)` is called (from this thread) as each fault
    finishes. A free slot draws from the open fault with the fewest units in flight (then the
    first in the plan), so slots spread over the faults.

    Over 60 lines on purpose: the slots' draw and the fold share the scheduler's state."""
    lock = threading.Lock()
    admitted = threading.Condition(lock)
    stop = threading.Event()
    finished: queue.SimpleQueue[_Done] = queue.SimpleQueue()
    budget = meter is not None and budgeted(plan.stop)
    clock = None if meter is None else meter.clock
    # Units handed to slots and units whose spend the meter holds: the difference is in flight.
    counts = [0, 0]
    refused: list[str | None] = [None]

    def draw(rt: Runtime) -> tuple[FaultWork, int, bool] | None:
        with admitted:
            while not stop.is_set():
                if budget and meter is not None:
                    in_flight = counts[0] - counts[1]
                    if meter.waits(plan.stop, in_flight):
                        admitted.wait(0.05)
                        continue
                    no = meter.refuses(plan.stop, in_flight)
                    if no is not None:
                        refused[0] = no
                        stop.set()
                        admitted.notify_all()
                        return None
                candidates = [w for w in works if w.open()]
                if not candidates:
                    if not any(w.left() for w in works):
                        return None
                    # A fault held to its window: its unit in flight may leave it more trials.
                    admitted.wait(0.05)
                    continue
                work = min(candidates, key=lambda w: (w.in_flight, w.index))
                k = work.taken
                work.taken += 1
                work.in_flight += 1
                counts[0] += 1
                pairs = True
                if work.watch is not None:
                    # What the unit runs is read from the trials folded so far.
                    pairs = work.watch.needs_pairs(work.tally)
                    work.watch.steer(rt.engine, work.tally)
                return work, k, pairs
            return None

    def slot(rt: Runtime) -> None:
        try:
            while (job := draw(rt)) is not None:
                work, k, pairs = job
                tally = Tally()
                spent = None if meter is None else Meter(clock)
                if spent is not None:
                    spent.trials = 1
                try:
                    out = work.trial.run(rt, work.spec, k, tally, pairs, spent)
                except BaseException as exc:  # re-raised by the scheduler, in trial order
                    finished.put((work, k, (tally, None, exc, spent)))
                    return
                finished.put((work, k, (tally, out, None, spent)))
        finally:
            finished.put(None)

    effects = unsafe = target_errors = done = 0
    reason: str | None = None
    failure: BaseException | None = None
    keep = False  # the stop lets finished units still count (a budget)
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
        work, k, result = item
        work.order.put(k, result)
        for _k, (tally, out, exc, spent) in work.order.ready():
            with admitted:
                work.in_flight -= 1
                if meter is not None and spent is not None:
                    meter.absorb(spent)
                    counts[1] += 1
                admitted.notify_all()
            if refused[0] is not None and reason is None and not keep:
                # A budget refused the next unit: those running finish and count.
                reason, keep = refused[0], True
            if stop.is_set() and not keep:
                continue
            if exc is not None or out is None:
                if not keep:
                    failure = exc
                    stop.set()
                continue
            with lock:
                work.tally.merge(tally)
            effects += out[0]
            unsafe += out[1]
            target_errors += out[2]
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
                    stop.set()
                    admitted.notify_all()
            elif (
                not work.closed
                and work.watch is not None
                and work.watch.done(work.tally, work.done)
            ):
                with admitted:
                    work.closed = True
                    admitted.notify_all()
        if fault_done is not None and not work.reported and work.finished():
            work.reported = True
            fault_done(work)
    for th in threads:
        th.join()
    if failure is not None:
        raise failure
    if reason is None and refused[0] is not None:
        reason = refused[0]
    return reason, done
