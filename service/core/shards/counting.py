"""Counting an assay's trials in the serial run's order: what the one scheduler
(`service.core.shards.scheduler`) hands out per fault (`FaultWork`), a trial in flight
(`StartedTrial`), and where every stop is read (`Counting`).

A trial finishes whenever its slots do; it is folded into its fault in the fault's trial order,
where the fault's rule reads it, and counted in the assay's trial order (every trial of the first
fault, then of the next: the serial run's), where it joins its fault's tally and the meter and the
stop conditions are read. So a stop (effects, unsafe escapes, target errors, a budget, an abort,
an arm that raised) falls at the serial run's trial whatever the concurrency: the trials before
it count, and those after it, run already at concurrency, are discarded whatever they show (what
they spent is paid: `past_stop`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from service.core.evidence.pairs import Removal
from service.core.evidence.spend import Meter
from service.core.evidence.stopping import Watch
from service.core.evidence.tally import SAMPLES, Tally
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards.baselines import SharedBaselines
from service.core.shards.shard import StopLimits, Stops, sample_of, stream_roots
from service.core.shards.slots import InOrder
from service.core.shards.slotted import SlotTrial

__all__ = [
    "BASE",
    "MAIN",
    "PAIRS",
    "Counting",
    "FaultWork",
    "StartedTrial",
    "TrialDone",
    "fault_work",
]


class FaultWork:
    """One fault's share of the scheduler: its trials to hand out, its fold order, the trials
    folded but not counted yet (`pending`) and its tally of those counted, its rule (a
    sequential plan's `Watch`, which reads the trials as folded: `seen`), and whether it is
    closed (decided: no unit of it starts).

    Or a paper-mode shard's (`spec` None): a range of the script's global trial sequence, whose
    trial k is of the fault `trial.pick(k)` draws (the script's generator, so drawn once per
    trial, in trial order) and is counted into that fault's tally (`tallies`, as faults first
    appear). It has no rule and is counted in its own order (not `ordered`: a fault's work
    keeps its samples in `tally`)."""

    __slots__ = (
        "closed",
        "cut",
        "done",
        "folded",
        "in_flight",
        "index",
        "order",
        "out",
        "pending",
        "reported",
        "seen",
        "shown",
        "spec",
        "start",
        "stop",
        "taken",
        "tallies",
        "tally",
        "trial",
        "trials",
        "watch",
        "window",
    )

    def __init__(
        self,
        index: int,
        spec: FaultSpec | None,
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
        # Trials counted (`tally`, the report's) and folded in the fault's own order; what the
        # folded trials showed (effects, unsafe escapes, target errors), and how many samples
        # and first violations they kept (a pending trial's are dropped where counting it could
        # keep none).
        self.done = 0
        self.folded = 0
        self.out = [0, 0, 0]
        self.shown = [0, 0]
        self.closed = False
        self.reported = False
        # The assay's stop was decided at this fault (its trials before the stop count).
        self.cut = False
        self.tally = Tally()
        self.tallies: dict[str, Tally] = {} if spec is None else {spec.id: self.tally}
        self.seen: Tally | None = None
        self.pending: deque[StartedTrial] = deque()
        self.order: InOrder[StartedTrial] = InOrder(start)

    def spec_at(self, k: int) -> FaultSpec:
        """Trial `k`'s fault (a paper shard's: drawn, so asked once per trial, in order)."""
        spec = self.spec
        return self.trial.pick(k) if spec is None else spec

    def tally_of(self, spec: FaultSpec) -> Tally:
        """The tally a trial of `spec` is counted into."""
        if spec is self.spec:
            return self.tally
        tally = self.tallies.get(spec.id)
        if tally is None:
            tally = self.tallies[spec.id] = Tally()
        return tally

    def open(self) -> bool:
        """Whether a free slot may start the fault's next unit."""
        if self.window is not None and self.in_flight >= self.window:
            return False
        return self.left()

    def left(self) -> bool:
        """Whether the fault may still start a unit (now or once its units in flight fold)."""
        return not self.closed and self.taken < self.stop

    def finished(self) -> bool:
        return (self.closed or self.taken >= self.stop) and self.in_flight == 0 and not self.pending

    def uncounted(self) -> int:
        """Trials started and not counted yet (in flight, or folded and pending)."""
        return self.taken - self.start - self.done


def fault_work(
    index: int,
    plan: AssayPlan,
    spec: FaultSpec,
    place: int,
    removals: dict[str, Removal],
    watch: Watch | None,
    trials: int,
    start: int = 0,
    shared: SharedBaselines | None = None,
) -> FaultWork:
    """Trials `start` to `start + trials` of the fault at `place` in the plan, keyed as the
    serial run keys them (its streams and evidence sample), under its rule's `watch` (None: the
    fixed plan). `shared`: the assay's shared baselines.

    A sequential fault runs one trial at a time: what its next trial runs (the pairs, the
    sensitivity run) is read from every trial before it, and no trial past its rule's stop ever
    starts, so its runs are the serial run's at any concurrency; concurrency comes from its
    faults side by side and each trial's arms at once."""
    wroot, sroot = stream_roots(plan, spec.id)
    base = place * plan.trials
    sample_key, sample_base = sample_of(plan, spec.id, base)
    trial = SlotTrial(
        plan,
        lambda k: spec,
        wroot,
        sroot,
        base,
        plan.sample_threshold(),
        sample_key,
        removals,
        sample_base=sample_base,
        shared=shared,
    )
    window = 1 if watch is not None else None
    return FaultWork(index, spec, trial, trials, watch, window, start)


#: A trial's arms as units: the intervention (with its sensitivity run), its matched baseline, and
#: its counterfactual pairs (ready once the intervention fired and was graded). Merged in this
#: order, their tallies are the serial loop's.
MAIN, BASE, PAIRS = 0, 1, 2


class StartedTrial:
    """One trial in flight: its fault and keys, what its arms run, their results until every arm
    is in, and how many arms are still to run or running (`left`)."""

    __slots__ = (
        "exc",
        "extra",
        "k",
        "left",
        "out",
        "pairs",
        "sent",
        "skey",
        "spec",
        "spent",
        "tallies",
        "wkey",
    )

    def __init__(
        self, k: int, spec: FaultSpec, wkey: int, skey: int, extra: bool, pairs: bool
    ) -> None:
        self.k = k
        self.spec = spec
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
        """The trial's arms merged, in the serial loop's order (once: read again, the same)."""
        merged = self.tallies[MAIN]
        assert merged is not None  # the intervention always runs first
        for part in (BASE, PAIRS):
            theirs = self.tallies[part]
            if theirs is not None:
                merged.merge(theirs)
                self.tallies[part] = None
        return merged


#: What `run_scheduled` tells of each trial as it is counted or discarded: its fault, what its
#: arms spent, and its (effects, unsafe escapes, target errors) when counted (None: discarded).
TrialDone = Callable[[FaultWork, tuple[Meter | None, ...], tuple[int, int, int] | None], None]


class Counting:
    """The assay's stops, read as trials are counted: each fault's folded trials join its tally
    and the meter in the order the stops are read (`ordered`: the faults in turn, each in its
    trial order; else each fault's as they come), and after each the stop conditions are read
    exactly as the serial loop reads them: an abort and a budget before the trial, an arm that
    raised, then effects, unsafe escapes, target errors and the budgets after it. The first stop
    discards every trial not counted yet, whatever it shows: the serial run never ran it. Used
    under the scheduler's lock."""

    def __init__(
        self,
        works: list[FaultWork],
        plan: AssayPlan,
        limits: StopLimits | None,
        meter: Meter | None,
        should_stop: Callable[[], bool] | None,
        batch: int,
        trial_done: TrialDone | None,
        ordered: bool,
        *,
        serial: bool = False,
    ) -> None:
        """`serial`: one slot, whose next trial starts only once every trial before it is
        counted; the stops read before a trial are read as it is admitted, so none runs past
        them (the serial loop's own order)."""
        self.works = works
        self.plan = plan
        # The counts alone (no deadline): what the trials folded so far already trip.
        self.counts = None if limits is None else replace(limits, deadline=None, clock=None)
        self.meter = meter
        self.stops = Stops(plan.stop, limits, meter, should_stop, batch)
        # Whether a counted trial can trip anything (a stop condition or a budget).
        self.reads = limits is not None or self.stops.budget
        self.trial_done = trial_done
        self.ordered = ordered
        self.cursor = 0  # ordered: the fault being counted (those before it are)
        self.out = [0, 0, 0]  # effects, unsafe escapes, target errors counted
        self.done = 0
        self.reason: str | None = None
        self.failure: BaseException | None = None
        self.stopped = threading.Event()
        self.serial = serial

    def fold(self, work: FaultWork, tr: StartedTrial) -> None:
        """A trial released in its fault's order: the fault's rule reads it (`seen`), and it
        waits to be counted."""
        if self.stopped.is_set():
            self.discard(work, tr)
            return
        if tr.exc is not None:
            work.closed = True  # nothing of the fault after it would have run
        else:
            tally = tr.tally()
            if self.ordered:
                _trim(work, tally)
            if work.seen is not None:
                work.seen.merge(tally)
            work.folded += 1
            for i in range(3):
                work.out[i] += tr.out[i]
            if self.ordered:
                self._rule(work, work.seen if work.seen is not None else work.tally, work.folded)
        work.pending.append(tr)

    def _rule(self, work: FaultWork, tally: Tally, trials: int) -> None:
        """The fault's rule reads its trials so far: decided, it is closed (no trial of it
        starts again)."""
        if work.watch is not None and not work.closed and work.watch.done(tally, trials):
            work.closed = True

    def count(self, work: FaultWork) -> list[FaultWork]:
        """Count what may be counted now; return the faults it finished, in order."""
        ended: list[FaultWork] = []
        if not self.ordered:
            while work.pending and not self.stopped.is_set():
                self._one(work, work.pending.popleft())
            return ended
        while self.cursor < len(self.works) and not self.stopped.is_set():
            here = self.works[self.cursor]
            while here.pending and not self.stopped.is_set():
                self._one(here, here.pending.popleft())
            if self.stopped.is_set() or not here.finished():
                break
            ended.append(here)
            self.cursor += 1
        return ended

    def _one(self, work: FaultWork, tr: StartedTrial) -> None:
        meter = self.meter
        no = None if self.serial else self.stops.before(self.done)
        if no is not None:
            self.halt(work, no, tr)
            return
        if tr.exc is not None:
            self.failure = tr.exc
            self.halt(work, None, tr)
            return
        if meter is not None:
            for spent in tr.spent:
                if spent is not None:
                    meter.absorb(spent)
        work.tally_of(tr.spec).merge(tr.tally())
        work.done += 1
        self.done += 1
        for i in range(3):
            self.out[i] += tr.out[i]
        if self.trial_done is not None:
            self.trial_done(work, tuple(tr.spent), (tr.out[0], tr.out[1], tr.out[2]))
        reason = self.stops.after(self.out[0], self.out[1], self.out[2])
        if reason is not None:
            # Read before the fault's rule, as the serial loop does: the fault was stopped.
            self.halt(work, reason, None, at=work.done)
        elif not self.ordered:
            self._rule(work, work.tally, work.done)

    def counted(self, work: FaultWork, out: tuple[int, int, int], spent: Meter | None) -> None:
        """A trial the one slot ran straight into its fault's tally (`spent`: what it spent, in
        a meter of its own or the run's): counted as `_one` counts a folded trial, the stops and
        then the fault's rule read after it."""
        meter = self.meter
        if meter is not None:
            if spent is meter:
                meter.trials += 1
            elif spent is not None:
                meter.absorb(spent)
        work.done += 1
        work.folded += 1
        self.done += 1
        mine, ours = work.out, self.out
        e, u, te = out
        mine[0] += e
        mine[1] += u
        mine[2] += te
        ours[0] += e
        ours[1] += u
        ours[2] += te
        if self.trial_done is not None:
            self.trial_done(work, (spent,), out)
        reason = self.stops.after(ours[0], ours[1], ours[2]) if self.reads else None
        if reason is not None:
            self.halt(work, reason, None, at=work.done)
        elif work.watch is not None:
            self._rule(work, tally=work.tally, trials=work.done)

    def halt(
        self, work: FaultWork, reason: str | None, tr: StartedTrial | None, at: int | None = None
    ) -> None:
        """Stop at `work`: its counted trials stand, `tr` and every later trial are discarded.
        A rule's stop read from a trial that does not count (or, `at`, from the trial the stop
        was read after) is no stop: the fault was cut short."""
        if tr is not None:
            self.discard(work, tr)
        if self.stopped.is_set():
            return
        self.reason = reason
        work.cut = True
        self.stopped.set()
        for w in self.works:
            stop = None if w.watch is None else w.watch.stop
            if stop is not None and (stop.trials > w.done or (w is work and stop.trials == at)):
                assert w.watch is not None
                w.watch.stop = None

    def discard(self, work: FaultWork, tr: StartedTrial) -> None:
        """A trial past the stop: not evidence; what it spent is paid all the same."""
        if self.meter is not None:
            for spent in tr.spent:
                if spent is not None:
                    self.meter.discard(spent)
        if self.trial_done is not None:
            self.trial_done(work, tuple(tr.spent), None)

    def sweep(self) -> None:
        """Once every slot has stopped: discard what was folded but never counted."""
        for w in self.works:
            while w.pending:
                self.discard(w, w.pending.popleft())

    def before(self, work: FaultWork) -> int:
        """Trials that come before `work`'s next one in the counting order and are not counted
        yet: started, or (ordered) still to come from a fault before it that is not decided."""
        if not self.ordered:
            return sum(w.uncounted() for w in self.works)
        n = work.uncounted()
        for w in self.works:
            if w is work:
                break
            n += w.uncounted() + (0 if w.closed else w.stop - w.taken)
        return n

    def admit(self, candidates: list[FaultWork]) -> FaultWork | None:
        """The fault whose next trial starts now, if any: never one whose trial would not count
        (ordered: the trials folded before it already trip a stop condition, so the serial run
        stops before it). Without a budget, the one with the fewest trials in flight (then the
        first), so slots spread over the faults. Under a budget, in the counting order: a trial
        starts only if what is left pays for it and for every trial before it, each estimated
        at what the counted trials cost; with none before it, the budget's word is the serial
        run's, and a refusal stops the assay."""
        ready = candidates
        if self.ordered and self.counts is not None and not self.serial:
            # The works are in plan order: the folded counts before each grow down the list.
            out, ready, mine = [0, 0, 0], [], set(map(id, candidates))
            for w in self.works:
                for i in range(3):
                    out[i] += w.out[i]
                if self.counts.tripped(out[0], out[1], out[2]) is not None:
                    break
                if id(w) in mine:
                    ready.append(w)
        if not ready:
            return None
        if len(ready) == 1:
            work = ready[0]
        elif self.stops.budget:
            work = min(ready, key=lambda w: w.index)
        else:
            work = min(ready, key=lambda w: (w.in_flight, w.index))
        if self.serial:
            no = self.stops.before(self.done)
            if no is not None:
                self.halt(work, no, None)
                return None
        if not self.stops.budget:
            return work
        word = self.stops.admits(self.before(work))
        if isinstance(word, str):
            self.halt(work, word, None)
            return None
        return work if word else None


def _trim(work: FaultWork, tally: Tally) -> None:
    """Drop from a folded trial what counting it could not keep (the fault's trials before it
    already hold the samples and the first violation a tally keeps), so trials waiting to be
    counted hold counts, not traces."""
    kept, violated = len(tally.samples), tally.first_violation is not None
    if work.shown[0] >= SAMPLES:
        tally.samples = []
    if work.shown[1]:
        tally.first_violation = None
    work.shown[0] += kept
    work.shown[1] += violated
