"""The slotted executor of a paper-mode shard: its trials on N isolated copies of the team's world
at once (`SlottedEngine`), folded in trial order so counts, samples and stop conditions are those
of the serial loop in `service.core.shards.assay.run_shard`. A paper shard's trials mix faults, so
it is not a range of one fault's trials; a fault's shard runs by the one scheduler instead
(`service.core.shards.held`). What a slot runs (`SlotTrial`) is shared by both.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from service.core.evidence.pairs import Removal
from service.core.evidence.spend import Meter
from service.core.evidence.tally import Tally
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards import arms
from service.core.shards.baselines import SharedBaselines
from service.core.shards.shard import ShardSpec, StopLimits, Stops
from service.core.shards.slots import InOrder
from service.core.trial.harness import Runtime
from service.core.trial.rng import derive

T = TypeVar("T")


def slot_threads(
    runtimes: list[Runtime], slot: Callable[[Runtime], None], finished: queue.SimpleQueue[T | None]
) -> Iterator[T]:
    """Run `slot(rt)` on a thread per runtime and yield what the slots put on `finished`, until
    each has put its None (a slot that stopped); the threads are joined once all have."""
    threads = [threading.Thread(target=slot, args=(rt,), daemon=True) for rt in runtimes]
    for th in threads:
        th.start()
    running = len(threads)
    while running:
        item = finished.get()
        if item is None:
            running -= 1
            continue
        yield item
    for th in threads:
        th.join()


class SlotTrial:
    """What a slot needs to run trial `k` of a shard (the slotted path's share of run_shard's
    locals). `run` runs a whole trial (paper mode's executor); the scheduler runs a trial's
    arms itself and needs only `keys`."""

    def __init__(
        self,
        plan: AssayPlan,
        pick: Callable[[int], FaultSpec],
        wroot: int,
        sroot: int,
        base: int,
        threshold: int | None,
        sample_key: int,
        removals: dict[str, Removal],
        *,
        sample_base: int | None = None,
        shared: SharedBaselines | None = None,
    ) -> None:
        """`sample_base`: the offset of the evidence sample's draw (None: `base`, the fault's
        place in the plan; 0 where the sample is the baseline group's); `shared`: the assay's
        shared baselines (`service.core.shards.baselines`)."""
        self.plan = plan
        self.pick = pick
        self.wroot = wroot
        self.sroot = sroot
        self.base = base
        self.threshold = threshold
        self.sample_key = sample_key
        self.removals = removals
        self.sample_base = base if sample_base is None else sample_base
        self.shared = shared

    def keys(self, k: int) -> tuple[int, int, bool]:
        """Trial `k`'s workload and storm keys, and whether it is in the evidence sample (its
        matched baseline and pairs run)."""
        t = self.threshold
        extra = t is None or derive(self.sample_key, self.sample_base + k) < t
        return derive(self.wroot, k), derive(self.sroot, k), extra

    def run(
        self,
        rt: Runtime,
        spec: FaultSpec,
        k: int,
        tally: Tally,
        pairs: bool = True,
        meter: Meter | None = None,
    ) -> tuple[int, int, int]:
        wkey, skey, extra = self.keys(k)
        rm = self.removals[spec.id]
        if meter is not None:
            meter.mark()
        plan = self.plan
        return arms.one_trial(
            rt, plan, spec, tally, self.base + k, wkey, skey, rm, extra, meter, pairs
        )


# A finished trial on its way from a slot to the shard: its number, fault, own tally, and
# (effects, unsafe, target errors) or the exception it raised, and what it spent; None: a slot
# has stopped.
_Done = (
    tuple[int, FaultSpec, Tally, tuple[int, int, int] | None, BaseException | None, Meter | None]
    | None
)


def run_slotted(
    runtimes: list[Runtime],
    trial: SlotTrial,
    shard: ShardSpec,
    tallies: dict[str, Tally],
    should_stop: Callable[[], bool] | None,
    batch: int,
    limits: StopLimits | None,
    meter: Meter | None = None,
) -> tuple[int, int, int, int, str | None]:
    """The executor path: one thread per slot takes the next trial number, runs it into a tally
    of its own, and hands it back; trials are folded in trial order (`InOrder`), and the stop
    conditions read as each is, exactly as the serial loop reads them (an abort and a budget
    before the trial, effects, unsafe escapes, target errors and the budgets after it), so
    counts, samples, spend and stops are those of the serial loop at any concurrency. Trials
    still running when a stop trips are waited for and discarded whatever they show, as the
    serial loop would never have run them (what they spent is the meter's `past_stop`).

    A budget admits a trial only if what is left pays for it and for the trials in flight, each
    estimated at what the folded trials cost; a trial it does not admit waits for those in
    flight, and the budget's word with none in flight is the serial loop's."""
    taken = iter(range(shard.start, shard.stop))
    lock = threading.Lock()
    stop = threading.Event()
    finished: queue.SimpleQueue[_Done] = queue.SimpleQueue()
    clock = None if meter is None else meter.clock
    stops = Stops(trial.plan.stop, limits, meter, should_stop, batch)
    # Trials handed to a slot and trials whose spend the meter holds (both under `lock`): the
    # difference is what is in flight when a budget admits the next one.
    counts = [0, 0]
    # A budget's refusal of a next trial (set by a slot, under the lock).
    refused: list[str | None] = [None]
    admitted = threading.Condition(lock)

    def next_trial() -> tuple[int, FaultSpec] | None:
        # Under the lock, in order: paper mode's fault choice is a sequential stream.
        with admitted:
            while not stop.is_set():
                word = stops.admits(counts[0] - counts[1])
                if isinstance(word, str):
                    refused[0] = word
                    stop.set()
                    admitted.notify_all()
                    break
                if word:
                    break
                admitted.wait(0.05)
            if stop.is_set():
                return None
            k = next(taken, None)
            if k is None:
                return None
            counts[0] += 1
            return k, trial.pick(k)

    def slot(rt: Runtime) -> None:
        try:
            while (job := next_trial()) is not None:
                k, spec = job
                tally = Tally()
                spent = None if meter is None else Meter(clock)
                if spent is not None:
                    spent.trials = 1
                try:
                    out = trial.run(rt, spec, k, tally, True, spent)
                except BaseException as exc:  # re-raised by the shard, in trial order
                    finished.put((k, spec, tally, None, exc, spent))
                    return
                finished.put((k, spec, tally, out, None, spent))
        finally:
            finished.put(None)

    done = effects = unsafe = target_errors = 0
    reason: str | None = None
    failure: BaseException | None = None
    if stops.opening() is not None:
        return 0, 0, 0, 0, "aborted"
    order: InOrder[
        tuple[FaultSpec, Tally, tuple[int, int, int] | None, BaseException | None, Meter | None]
    ]
    order = InOrder(shard.start)
    for item in slot_threads(runtimes, slot, finished):
        k, spec, tally, out, exc, spent = item
        order.put(k, (spec, tally, out, exc, spent))
        for _k, (spec, tally, out, exc, spent) in order.ready():
            with admitted:
                counts[1] += 1
                # Before the trial, as the serial loop: an abort, then a budget.
                if not stop.is_set():
                    reason = stops.before(done)
                    if reason is None and (exc is not None or out is None):
                        failure = exc
                    if reason is not None or failure is not None:
                        stop.set()
                if meter is not None and spent is not None:
                    if stop.is_set():
                        meter.discard(spent)  # past the stop: paid, not evidence
                    else:
                        meter.absorb(spent)
                admitted.notify_all()
            if stop.is_set() or out is None:
                continue
            mine = tallies.get(spec.id)
            if mine is None:
                mine = tallies[spec.id] = tally
            else:
                mine.merge(tally)
            effects += out[0]
            unsafe += out[1]
            target_errors += out[2]
            done += 1
            with admitted:
                reason = stops.after(effects, unsafe, target_errors)
            if reason is not None:
                stop.set()
    if failure is not None:
        raise failure
    if reason is None and refused[0] is not None:
        reason = refused[0]
    return done, effects, unsafe, target_errors, reason
