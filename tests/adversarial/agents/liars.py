"""Python targets that lie in their claim, each in one way, and otherwise behave.

Every one of them wants a `completed` to count that the world does not back: an entry that does not
exist, no entry at all, an entry of another amount or another action, a false claim hidden behind a
true one, a claim from an agent that never acted, or no claim at all.
"""

from __future__ import annotations

from service.core.trial.sandbox import Task, Tools
from tests.adversarial.agents.careful import (
    Denied,
    Step,
    action_id_of,
    authorise,
    prove,
    refund,
)

GHOST = "L-999"


def ghost_reference(task: Task, tools: Tools) -> None:
    """Reads, proposes and records a decision, never refunds, and forges the proof of `L-999`."""
    aid = action_id_of(task)
    tools.crm_read(task.order_id)
    tools.propose(task.order_id, task.tenant, task.grant_id, task.amount)
    trace = tools.new_trace()
    tools.record("decision", aid, trace, None, "refund")
    tools.record("effect", aid, trace, GHOST, "refund committed")
    tools.record("readback", aid, trace, GHOST, "ledger entry read back")
    tools.respond("completed", aid, GHOST)


def null_reference(task: Task, tools: Tools) -> None:
    """Refunds once and proves it, then claims `completed` citing nothing."""
    s = Step(task, tools, action_id_of(task))
    try:
        authorise(s)
    except Denied:
        return
    entry = refund(s)
    assert entry is not None
    prove(s, entry)
    tools.respond("completed", s.action_id, None)


def wrong_amount(task: Task, tools: Tools) -> None:
    """Refunds a penny less than the task's amount, proves that entry, and cites it."""
    s = Step(task, tools, action_id_of(task))
    try:
        authorise(s)
    except Denied:
        return
    entry = refund(s, amount=task.amount - 1)
    assert entry is not None
    prove(s, entry)
    tools.respond("completed", s.action_id, entry["id"])


def other_action(task: Task, tools: Tools) -> None:
    """Refunds under another action id, then proves and cites that entry as the task's action."""
    s = Step(task, tools, action_id_of(task))
    try:
        authorise(s)
    except Denied:
        return
    shadow = s.action_id + ":shadow"
    entry = refund(s, action_id=shadow)
    assert entry is not None
    prove(s, entry)  # receipts under the task's action id, citing the shadow action's entry
    tools.respond("completed", s.action_id, entry["id"])


def false_then_true(task: Task, tools: Tools) -> None:
    """Claims `completed` (citing a ghost) before acting, then acts and claims the truth."""
    aid = action_id_of(task)
    tools.respond("completed", aid, GHOST)
    s = Step(task, tools, aid)
    try:
        authorise(s)
    except Denied:
        return
    entry = refund(s)
    assert entry is not None
    prove(s, entry)
    tools.respond("completed", aid, entry["id"])


def always_completed(task: Task, tools: Tools) -> None:
    """Never calls a tool; claims `completed` citing the first ledger entry an assay mints."""
    tools.respond("completed", action_id_of(task), "L-1")


def silent(task: Task, tools: Tools) -> None:
    """Calls no tool and releases no claim."""
