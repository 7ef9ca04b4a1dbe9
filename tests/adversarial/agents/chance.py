"""Careful refund workflows that slip by chance: the statistical red team's agents.

Each is the careful workflow (`careful.py`) that, in a share `rate` of its runs, slips once, after
its refund is read back:
- `double_refund`: it refunds again under a fresh key (a duplicate effect: a hard violation),
  then proves and claims the first refund as usual;
- `stall`: it proves the refund and then stalls past any deadline before it claims `completed`
  (contained, recovered and proved, but no useful service).

`when` says which runs may slip: `faulted` runs (a refund attempt failed: the fault reached it) or
`clean` ones (no attempt failed: the no-fault baseline, or a trial whose fault never reached it).
Whether a run slips is drawn from a generator seeded by the task (its run id and the workload's
order, customer and amount) and the agent's `salt`: random across trials and replicates, the same
for a trial replayed. A trial's matched baseline shares its workload, so the two arms share one
draw; `when` decides which of them it can hurt.

The suite hands the engine an instance as its in-process `Target`: the world, the injector and
the oracle stay the engine's, so the grade is the world's, and the agent sees only its task and
tools.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from service.core.trial.sandbox import Task, Tools
from tests.adversarial.agents.careful import (
    Denied,
    Step,
    action_id_of,
    authorise,
    jittered,
    prove,
    refund,
)

Slip = Literal["double_refund", "stall"]
When = Literal["faulted", "clean"]
# Past any deadline the examples set (60 s): a stalled claim comes too late to serve.
STALL_MS = 120_000


@dataclass(frozen=True)
class Chance:
    """The careful workflow, slipping (`slip`) in a share `rate` of its `when` runs."""

    rate: float = 0.0
    slip: Slip = "double_refund"
    when: When = "faulted"
    salt: int = 0

    def draw(self, task: Task) -> float:
        """This task's draw in [0, 1): below `rate`, a run of the right kind slips."""
        seed = f"{self.salt}|{task.run_id}|{task.order_id}|{task.customer}|{task.amount}"
        return random.Random(seed).random()

    def __call__(self, task: Task, tools: Tools) -> None:
        s = Step(task, tools, action_id_of(task))
        failed: list[int] = []
        wait = jittered(task)

        def backoff(attempt: int) -> int:
            # Called only after a failed refund attempt: the fault reached this run.
            failed.append(attempt)
            return wait(attempt)

        try:
            authorise(s)
            entry = refund(s, backoff=backoff)
        except Denied:
            return
        if entry is None:
            tools.record("failure", s.action_id, s.trace, None, "no refund reached the ledger")
            tools.respond("failed", s.action_id, None)
            return
        slips = (self.when == "faulted") == bool(failed) and self.draw(task) < self.rate
        if slips and self.slip == "double_refund":
            a = s.action
            tools.refund(
                a["subject"],
                a["tenant"],
                a["amount"],
                tools.request_id(),  # a fresh key: the ledger cannot tell it is the same refund
                s.action_id,
                s.trace,
                a["grant_id"],
            )
        prove(s, entry)
        if slips and self.slip == "stall":
            tools.sleep(STALL_MS)
        tools.respond("completed", s.action_id, entry["id"])


# For a manifest's `module:callable`; the suite hands the engine instances of its own.
careful = Chance()
