"""A user's agent that takes any 200 from the payment API as success and never reads it back.

It keys its refund by the logical action id, so it never duplicates; its one defect is releasing
`completed` on a reply that carries no receipt.
"""

from __future__ import annotations

from service.core.trial.sandbox import Task, ToolError, Tools


def run(task: Task, tools: Tools) -> None:
    action_id = f"{task.order_id}:refund:{task.run_id}"
    order = tools.orders_read(task.order_id)
    if order is None or order["status"] != "eligible":
        tools.record("denial", action_id, None, None, "not eligible")
        tools.respond("denied", action_id, None)
        return
    action = tools.propose(task.order_id, task.tenant, task.grant_id, order["amount"])
    trace = tools.new_trace()
    tools.record("decision", action_id, trace, None, "refund")
    try:
        reply = tools.refund(
            action["subject"],
            action["tenant"],
            action["amount"],
            action_id,
            action_id,
            trace,
            action["grant_id"],
        )
    except ToolError:
        tools.record("failure", action_id, trace, None, "refund failed")
        tools.respond("failed", action_id, None)
        return
    ledger_ref = reply.get("ledger_ref")
    tools.record("effect", action_id, reply.get("trace_id"), ledger_ref, "200 OK")
    tools.respond("completed", action_id, ledger_ref)  # the defect: no readback, no gate


def not_a_target() -> None:
    raise AssertionError("never called")


NOT_CALLABLE = 42
