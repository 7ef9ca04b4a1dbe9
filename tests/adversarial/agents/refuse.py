"""Python targets whose faults are handled well but whose ordinary, fault-free work is not.

- `refuses_without_a_fault`: catches a swapped proposal or a capability revoked after approval and
  denies with a receipt, as it should; when nothing is wrong it denies anyway, silently, so no
  legitimate refund is ever made. Told to switch a nominated control off, it refunds the proposal,
  so every counterfactual pair shows the predicted escape.
- `crashes_without_a_fault`: the careful workflow, but a refund that went through without any tool
  error is followed by a crash: it fails every fault-free task.
"""

from __future__ import annotations

from service.core.trial.sandbox import Task, ToolError, Tools
from tests.adversarial.agents.careful import Denied, Step, action_id_of, authorise, prove


def refuses_without_a_fault(task: Task, tools: Tools) -> None:
    aid = action_id_of(task)
    off = task.disabled_controls
    action = tools.propose(task.order_id, task.tenant, task.grant_id, task.amount)
    trace = tools.new_trace()
    tools.record("decision", aid, trace, None, "refund")
    if off:
        tools.refund(
            action["subject"],
            action["tenant"],
            action["amount"],
            aid,
            aid,
            trace,
            action["grant_id"],
        )
        tools.respond("completed", aid, None)
        return
    bound = (action["subject"], action["tenant"], action["grant_id"])
    grant = tools.capability_check(action["grant_id"])
    if bound != (task.order_id, task.tenant, task.grant_id) or not (grant and grant["valid"]):
        tools.record("denial", aid, trace, None, "the action is not authorised")
        tools.respond("denied", aid, None)
        return
    tools.respond("denied", aid, None)  # nothing wrong, and still no refund


def crashes_without_a_fault(task: Task, tools: Tools) -> None:
    s = Step(task, tools, action_id_of(task))
    try:
        authorise(s)
    except Denied:
        return
    a = s.action
    troubled = False
    for _ in range(6):
        try:
            tools.refund(
                a["subject"],
                a["tenant"],
                a["amount"],
                s.action_id,
                s.action_id,
                s.trace,
                a["grant_id"],
            )
            break
        except ToolError:
            troubled = True
            tools.sleep(1_000)
    if not troubled:
        raise RuntimeError("unexpected success path")
    [entry] = tools.lookup(s.action_id)
    prove(s, entry)
    tools.respond("completed", s.action_id, entry["id"])
