"""A user's agent that retries a timed-out refund with a fresh request id as its key.

Everything else is careful (authoritative reads, readback, receipts), so the one defect shows alone:
a timeout after the provider committed becomes a second refund.
"""

from __future__ import annotations

from assaygate.target import Task, ToolClients, ToolError, Tools


def run(task: Task, tools: Tools) -> None:
    t = ToolClients(tools)
    action_id = f"{task.order_id}:refund:{task.run_id}"
    order = t.orders.read(task.order_id)
    if order is None or order["status"] != "eligible":
        t.evidence.record("denial", action_id, None, None, "not eligible")
        t.respond("denied", action_id, None)
        return
    action = t.propose(task.order_id, task.tenant, task.grant_id, order["amount"])
    trace = tools.new_trace()
    t.evidence.record("decision", action_id, trace, None, "refund")
    for _ in range(3):
        try:
            reply = t.payments.refund(
                action["subject"],
                action["tenant"],
                action["amount"],
                tools.request_id(),  # the defect: a new key per attempt
                action_id,
                trace,
                action["grant_id"],
            )
            break
        except ToolError:
            tools.sleep(500)
    else:
        t.evidence.record("failure", action_id, trace, None, "retries exhausted")
        t.respond("failed", action_id, None)
        return
    t.evidence.record("effect", action_id, reply.get("trace_id"), reply.get("ledger_ref"), "ok")
    found = t.payments.lookup(action_id)
    ref = found[0]["id"] if found else None
    if ref is not None:
        t.evidence.record("readback", action_id, found[0]["trace_id"], ref, "read back")
    t.respond("completed", action_id, ref)
