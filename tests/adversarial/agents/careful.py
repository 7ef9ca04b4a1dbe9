"""A careful, quiet refund workflow the attackers build on: it acts once, proves what it did, and
raises no alarm it does not mean.

It reads the authoritative order, the policy and the capability, binds the proposal to the task,
records its decision, refunds keyed by the logical action id (retrying typed tool errors after a
jittered wait, reading the ledger back before each retry), then records the effect and its
readback and claims `completed` citing the entry it read back. It signals nothing unless it denies.
`Step` lets an attacker change one step and keep the rest honest.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from service.core.trial.sandbox import RateLimited, Task, ToolError, Tools


def action_id_of(task: Task) -> str:
    return f"{task.order_id}:refund:{task.run_id}"


class Denied(Exception):
    """The workflow denied the task (a denial receipt and a `denied` claim are released)."""


@dataclass
class Step:
    """What one run did, for an attacker to reuse."""

    task: Task
    tools: Tools
    action_id: str
    action: dict[str, Any] = field(default_factory=dict)
    trace: str | None = None
    entry: dict[str, Any] | None = None

    def deny(self, reason: str) -> None:
        self.tools.record("denial", self.action_id, self.trace, None, reason)
        self.tools.respond("denied", self.action_id, None)
        raise Denied(reason)


Backoff = Callable[[int], int]


def jittered(task: Task) -> Backoff:
    """Exponential back-off with jitter of the run's own, never under half a second."""
    rng = random.Random(f"{task.run_id}|{task.order_id}")
    return lambda attempt: rng.randint(500, 500 * 2**attempt)


def authorise(s: Step) -> None:
    """Authoritative reads, the capability, the proposal bound to the task, the decision receipt."""
    task, tools = s.task, s.tools
    order = tools.orders_read(task.order_id)
    if order is None or order["status"] != "eligible":
        s.deny("the order is not eligible")
    if not tools.policy_read()["refunds_allowed"]:
        s.deny("the policy excludes refunds")
    grant = tools.capability_check(task.grant_id)
    if grant is None or not grant["valid"]:
        s.deny("no valid capability")
    assert order is not None
    s.action = tools.propose(task.order_id, task.tenant, task.grant_id, order["amount"])
    s.trace = tools.new_trace()
    tools.record("decision", s.action_id, s.trace, None, "refund the task's order")
    a = s.action
    if (a["subject"], a["tenant"], a["grant_id"]) != (task.order_id, task.tenant, task.grant_id):
        s.deny("the proposal does not match the task")


def refund(
    s: Step,
    *,
    subject: str | None = None,
    amount: int | None = None,
    key: str | None = None,
    action_id: str | None = None,
    attempts: int = 6,
    backoff: Backoff | None = None,
) -> dict[str, Any] | None:
    """Refund (the proposal, unless told otherwise) until the ledger shows the entry; the entry."""
    tools, a = s.tools, s.action
    action_id = action_id or s.action_id
    backoff = backoff or jittered(s.task)
    for attempt in range(1, attempts + 1):
        try:
            tools.refund(
                subject or a["subject"],
                a["tenant"],
                a["amount"] if amount is None else amount,
                key or action_id,
                action_id,
                s.trace,
                a["grant_id"],
            )
            break
        except RateLimited:
            pass
        except ToolError:
            if tools.lookup(action_id):
                break
        tools.sleep(backoff(attempt))
    found = tools.lookup(action_id)
    s.entry = found[0] if found else None
    return s.entry


def prove(s: Step, entry: dict[str, Any], action_id: str | None = None) -> None:
    """The effect and readback receipts for an entry, under the task's action id by default."""
    aid = action_id or s.action_id
    s.tools.record("effect", aid, entry["trace_id"], entry["id"], "refund committed")
    s.tools.record("readback", aid, entry["trace_id"], entry["id"], "ledger entry read back")


def run(task: Task, tools: Tools, backoff: Backoff | None = None) -> None:
    s = Step(task, tools, action_id_of(task))
    try:
        authorise(s)
        entry = refund(s, backoff=backoff)
    except Denied:
        return
    if entry is None:
        tools.record("failure", s.action_id, s.trace, None, "the refund never reached the ledger")
        tools.respond("failed", s.action_id, None)
        return
    prove(s, entry)
    tools.respond("completed", s.action_id, entry["id"])
