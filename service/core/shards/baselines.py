"""The no-fault baseline shared by the faults on one tool (`plan.baseline: shared`).

Under a shared plan, trial k of every fault on a tool draws the same workload (the plan's seed,
the tool, k: `service.core.shards.shard.stream_roots`), so its matched baseline is the same run
for all of them. It runs once, for the first of them to need it, and every fault whose trial k
runs reads the same graded record into its own tally: its violations count against each of them
(a baseline violation ends every fault that used it, never one alone), and each fault's transfer
is read against it. Whether the workload reaches a fault is read from the run's calls for each
fault (`TrialRecord.reaches`), not from the fault the run was first matched to.

A baseline runs only where a fault runs its trial k (a fault its rule has stopped needs none),
so a group's baselines are as many as its longest-running fault's sampled trials. Its runs are
spent under the group (`spend_key`), never a fault's, so each fault's own spend is the same
whichever fault ran the baseline first, at any concurrency.

One per assay run in a process (the local assay, a worker's held shards); shards of one group
run by different workers each run the group's baseline (the same task: honest, not cheaper).
"""

from __future__ import annotations

import threading

from service.core.trial.record import TrialRecord

__all__ = ["SharedBaselines", "spend_key"]


def spend_key(group: str) -> str:
    """Where a group's shared baseline runs are spent (`Meter.faults`): never a fault's id, as
    a catalogue's fault ids are slugs without a colon."""
    return f"baseline:{group}"


class _Run:
    __slots__ = ("done", "failure", "record")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.record: TrialRecord | None = None
        self.failure: BaseException | None = None


class SharedBaselines:
    """The baseline runs of one assay, by (group, trial number): claimed by the first arm that
    needs one, waited for by the others (a slot that needs a baseline another slot is running
    waits for that run, which is already under way, so no slot waits on work nobody does)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, int], _Run] = {}

    def claim(self, group: str, k: int) -> tuple[_Run, bool]:
        """The run of (group, k) and whether the caller must execute it (`settle` after)."""
        with self._lock:
            run = self._runs.get((group, k))
            if run is not None:
                return run, False
            run = self._runs[(group, k)] = _Run()
            return run, True

    @staticmethod
    def settle(run: _Run, record: TrialRecord | None, failure: BaseException | None) -> None:
        run.record, run.failure = record, failure
        run.done.set()

    @staticmethod
    def wait(run: _Run) -> TrialRecord:
        """The record another arm ran (re-raising what that run raised)."""
        run.done.wait()
        if run.failure is not None:
            raise run.failure
        assert run.record is not None
        return run.record

    def __len__(self) -> int:
        return len(self._runs)
