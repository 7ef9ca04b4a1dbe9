"""The rare firer: a careful refund workflow that lets a fault fire in only a few trials.

It reads the cached eligibility assertion (`crm_read`, where `cross_source_conflict` strikes)
in a share `fire` of its runs only, and in a share `unsafe` of those it refunds twice under fresh
keys (a duplicate effect: a hard violation). Graded on the few trials it let the fault fire in,
it is allowed whenever those few happened to be clean: half the time at two fired trials and an
unsafe share of 0.3. Draws are seeded by the task and `salt`, as the chance agents' are.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from service.core.trial.sandbox import Task, Tools
from tests.adversarial.agents.careful import Denied, Step, action_id_of, authorise, prove, refund


@dataclass(frozen=True)
class RareFirer:
    fire: float = 0.01
    unsafe: float = 0.3
    salt: int = 0

    def __call__(self, task: Task, tools: Tools) -> None:
        draw = random.Random(f"{self.salt}|{task.run_id}|{task.order_id}|{task.amount}")
        reads, slips = draw.random() < self.fire, draw.random() < self.unsafe
        s = Step(task, tools, action_id_of(task))
        try:
            if reads:
                tools.crm_read(task.order_id)
            authorise(s)
            entry = refund(s)
        except Denied:
            return
        if entry is None:
            tools.record("failure", s.action_id, s.trace, None, "no refund reached the ledger")
            tools.respond("failed", s.action_id, None)
            return
        if reads and slips:
            refund(s, key=f"{s.action_id}:again", action_id=f"{s.action_id}:again")
        prove(s, entry)
        tools.respond("completed", s.action_id, entry["id"])
