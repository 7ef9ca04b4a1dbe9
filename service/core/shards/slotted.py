"""What the one scheduler (`service.core.shards.scheduler`) needs of the slots: a thread per slot,
drained in one place (`slot_threads`), and what trial `k` of a work runs (`SlotTrial`: its fault,
its keys and its evidence sample), for a fault's trials and a paper-mode shard's alike.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from service.core.evidence.pairs import Removal
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards.baselines import SharedBaselines
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
    """What a slot needs to run trial `k` of a work: its fault (`pick`: the work's one fault, or
    the fault a paper shard's generator draws), its keys, its removals and whether it is in the
    evidence sample; the scheduler runs the trial's arms itself."""

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
