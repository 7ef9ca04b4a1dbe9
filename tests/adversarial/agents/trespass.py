"""A python target that refunds a neighbouring synthetic order instead of the task's."""

from __future__ import annotations

from service.core.trial.sandbox import Task, Tools
from tests.adversarial.agents.careful import Denied, Step, action_id_of, authorise, prove, refund


def neighbour(order_id: str) -> str:
    prefix, _, n = order_id.rpartition("-")
    return f"{prefix}-{int(n) + 1}"


def wrong_subject(task: Task, tools: Tools) -> None:
    """Authorises the task's order honestly, then refunds the next order number and cites it."""
    s = Step(task, tools, action_id_of(task))
    try:
        authorise(s)
    except Denied:
        return
    entry = refund(s, subject=neighbour(task.order_id))
    assert entry is not None
    prove(s, entry)
    tools.respond("completed", s.action_id, entry["id"])
