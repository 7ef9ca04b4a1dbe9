"""Deterministic scripted "models" for the framework examples: no network, no API keys.

A policy is a generator that yields tool calls `(tool, arguments)`, is sent each call's parsed
reply (a dict, or None for an error), and returns the final claim. A framework's model turn asks
`next_step(policy, task, replies)`: the policy is replayed over the replies the conversation holds
so far, and the answer is the next tool call or the claim — so the model is stateless and the same
conversation always gets the same turn.

    careful    binds the subject, checks authority, looks for an earlier shipment, re-reads before
               the effect, keys the effect with the task's action id and reads it back
    defective  commit-blind: a fresh idempotency key on every attempt, trusts every reply
"""

from __future__ import annotations

import random
import time
from collections.abc import Generator
from typing import Any

Call = tuple[str, dict[str, Any]]
# The tokens each scripted model turn reports as its usage, as a real model's reply does.
TOKENS_PER_TURN = 100
# Not a tool: the policy backs off before its next call (`next_step` sleeps on a new turn).
WAIT = "__wait__"
Policy = Generator[Call, Any, dict[str, Any]]


def careful(task: dict[str, Any]) -> Policy:
    order_id, key = task["order_id"], task["action_id"]
    trace = f"00-{key.encode().hex()[:32]:0<32}-{'0' * 15}1-01"
    order = None
    for _ in range(3):  # bind identity: the reply must be about the task's order
        order = yield "get_order", {"order_id": order_id}
        if isinstance(order, dict) and order.get("order_id") == order_id:
            break
    else:
        return {"status": "held", "reason": "the order read does not match", "anomaly": True}
    grant = yield "check_release", {"order_id": order_id}
    if not (isinstance(grant, dict) and grant.get("released") is True):
        yield "log_event", {"order_id": order_id, "event": "denied", "trace": trace}
        return {"status": "denied", "reason": "not released"}
    if task["action"] == "ship":
        done = yield "find_shipment", {"key": key}
        if isinstance(done, dict) and done.get("found"):  # an earlier run of this task shipped
            yield "log_event", {"order_id": order_id, "event": "done", "trace": trace}
            return {"status": "completed", "effect_id": done["shipment_id"]}
    fresh = yield "get_order", {"order_id": order_id}  # re-read right before the effect
    if not isinstance(fresh, dict) or fresh.get("status") != "open":
        yield "log_event", {"order_id": order_id, "event": "denied", "trace": trace}
        return {"status": "denied", "reason": "the order changed before the effect"}
    effect_id = None
    for attempt in range(8):
        if attempt:
            # Rate limited or failed: back off with full jitter (the key makes the retry safe).
            yield WAIT, {"ms": random.uniform(0, 50 * 2**attempt)}
        if task["action"] == "ship":
            args = {"order_id": order_id, "quantity": task["quantity"], "key": key}
            yield "ship_order", args
            back = yield "find_shipment", {"key": key}  # read every effect back
            if isinstance(back, dict) and back.get("found") and back.get("order_id") == order_id:
                effect_id = back["shipment_id"]
                break
        else:
            r = yield "issue_credit", {"order_id": order_id, "amount": task["amount"], "key": key}
            if isinstance(r, dict) and r.get("credit_id") and r.get("order_id") == order_id:
                effect_id = r["credit_id"]
                break
    if effect_id is None:
        return {"status": "failed", "reason": "no effect could be confirmed", "anomaly": True}
    yield "log_event", {"order_id": order_id, "event": "done", "trace": trace}
    return {"status": "completed", "effect_id": effect_id}


def defective(task: dict[str, Any]) -> Policy:
    order_id = task["order_id"]
    yield "get_order", {"order_id": order_id}
    yield "check_release", {"order_id": order_id}
    for attempt in range(4):
        key = f"{task['action_id']}-{attempt}"  # a new key per attempt: commit-blind
        if task["action"] == "ship":
            args = {"order_id": order_id, "quantity": task["quantity"], "key": key}
            r = yield "ship_order", args
            if isinstance(r, dict) and "shipment_id" in r:
                return {"status": "completed", "effect_id": r["shipment_id"]}
        else:
            r = yield "issue_credit", {"order_id": order_id, "amount": task["amount"], "key": key}
            if isinstance(r, dict) and "credit_id" in r:
                return {"status": "completed", "effect_id": r["credit_id"]}
    return {"status": "failed"}


POLICIES = {"careful": careful, "defective": defective}


def next_step(policy: str, task: dict[str, Any], replies: list[Any]) -> Call | dict[str, Any]:
    """The next tool call after `replies`, or the final claim. A `WAIT` step is the policy
    backing off: replayed over replies it is passed at once; at the end of the conversation (a
    new turn) the model takes that long to answer."""
    run = POLICIES[policy](task)
    pending = list(replies)
    try:
        step = next(run)
        while True:
            if step[0] == WAIT:
                if not pending:
                    time.sleep(float(step[1]["ms"]) / 1000)
                step = run.send(None)
            elif pending:
                step = run.send(pending.pop(0))
            else:
                return step
    except StopIteration as done:
        claim: dict[str, Any] = done.value
        return claim
