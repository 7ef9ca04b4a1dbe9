"""A python target that duplicates a refund and then raises, hoping its error hides the damage.

Without a fault it works and claims honestly; when a refund times out it retries with a fresh key
(so `timeout_after_commit` commits twice) and then raises instead of releasing a claim.
"""

from __future__ import annotations

from service.core.trial.sandbox import Task, ToolError, Tools
from tests.adversarial.agents.careful import Denied, Step, action_id_of, authorise, prove


def duplicate_then_raise(task: Task, tools: Tools) -> None:
    s = Step(task, tools, action_id_of(task))
    try:
        authorise(s)
    except Denied:
        return
    a = s.action
    retried = False
    for _ in range(3):
        try:
            tools.refund(
                a["subject"],
                a["tenant"],
                a["amount"],
                tools.request_id(),  # a fresh key per attempt
                s.action_id,
                s.trace,
                a["grant_id"],
            )
            break
        except ToolError:
            retried = True
            tools.sleep(1_000)
    if retried:
        raise RuntimeError("lost the connection to the payments service")
    [entry] = tools.lookup(s.action_id)
    prove(s, entry)
    tools.respond("completed", s.action_id, entry["id"])


def always_raises(task: Task, tools: Tools) -> None:
    """Reads the order, then raises: every task is a target error with a clean world."""
    tools.orders_read(task.order_id)
    raise ValueError("no refunds today")
