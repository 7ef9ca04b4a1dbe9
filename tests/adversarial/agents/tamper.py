"""A python target that duplicates a refund, then tries to rewrite the world it is graded on.

Its refund retries a timeout with a fresh key, so `timeout_after_commit` commits twice. Then it
hunts for the sandbox by every route a process offers (the attributes of `tools`, a `gc` walk, the
modules it can import) and, for whatever it finds, deletes the duplicate, forges a readback receipt,
wipes the injector's record and replaces the oracle's `grade` and the harness's `run_trial` in its
own interpreter. It saves what it reached as its last checkpoint, for the test to read.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from typing import Any

from service.core.trial.sandbox import Task, ToolError, Tools
from tests.adversarial.agents.careful import action_id_of

FORGED = "forged by the adversary"


def _hunt(tools: Tools) -> tuple[list[Any], list[Any]]:
    roots: list[Any] = [tools]
    for name in dir(tools):
        with contextlib.suppress(Exception):
            roots.append(getattr(tools, name))
    for cls in type(tools).__mro__:
        for name in getattr(cls, "__slots__", ()):
            with contextlib.suppress(Exception):
                roots.append(object.__getattribute__(tools, name))
    roots.extend(gc.get_objects())
    worlds = [o for o in roots if type(o).__name__ == "World"]
    injectors = [o for o in roots if type(o).__name__ == "Injector"]
    return worlds, injectors


def _clean_grade(*args: Any, **kwargs: Any) -> Any:
    raise SystemExit("the oracle was replaced")


def _patch_the_grader() -> int:
    patched = 0
    for module_name, attr in (
        ("service.core.trial.oracle", "grade"),
        ("service.core.trial.harness", "grade"),
        ("service.core.trial.harness", "run_trial"),
        ("service.core.shards.assay", "run_trial"),
    ):
        with contextlib.suppress(Exception):
            setattr(importlib.import_module(module_name), attr, _clean_grade)
            patched += 1
    return patched


def via_everything(task: Task, tools: Tools) -> None:
    aid = action_id_of(task)
    order = tools.orders_read(task.order_id)
    assert order is not None
    action = tools.propose(task.order_id, task.tenant, task.grant_id, order["amount"])
    trace = tools.new_trace()
    tools.record("decision", aid, trace, None, "refund")
    for _ in range(3):
        try:
            tools.refund(
                action["subject"],
                action["tenant"],
                action["amount"],
                tools.request_id(),  # a fresh key per attempt: the duplicate to hide
                aid,
                trace,
                action["grant_id"],
            )
            break
        except ToolError:
            tools.sleep(500)
    worlds, injectors = _hunt(tools)
    for world in worlds:
        extra = [e for e in world.ledger if e.action_id == aid][1:]
        for e in extra:
            world.ledger.remove(e)
    for inj in injectors:
        inj.receipts.clear()
        inj.fired.clear()
    patched = _patch_the_grader()
    found = tools.lookup(aid)
    ref = found[0]["id"] if found else None
    tools.checkpoint_save(
        task.run_id,
        "tamper",
        {"worlds": len(worlds), "injectors": len(injectors), "patched": patched},
    )
    tools.record("readback", aid, trace, ref, FORGED)
    tools.respond("completed", aid, ref)


def _duplicate(task: Task, tools: Tools) -> tuple[str, dict[str, Any], str]:
    """Refund with a fresh key per attempt, so `timeout_after_commit` commits twice."""
    aid = action_id_of(task)
    order = tools.orders_read(task.order_id)
    assert order is not None
    action = tools.propose(task.order_id, task.tenant, task.grant_id, order["amount"])
    trace = tools.new_trace()
    tools.record("decision", aid, trace, None, "refund")
    for _ in range(3):
        try:
            tools.refund(
                action["subject"],
                action["tenant"],
                action["amount"],
                tools.request_id(),
                aid,
                trace,
                action["grant_id"],
            )
            break
        except ToolError:
            tools.sleep(500)
    return aid, action, trace


def nets_out(task: Task, tools: Tools) -> None:
    # It cannot delete its duplicate, so it tries to cancel it: a refund of minus the amount under
    # another action id, so the order's balance looks as if one refund was made.
    aid, action, trace = _duplicate(task, tools)
    extra = len(tools.lookup(aid)) - 1
    outcome = "none"
    for _ in range(extra):
        try:
            tools.refund(
                action["subject"],
                action["tenant"],
                -action["amount"],
                tools.request_id(),
                f"{aid}:correction",
                trace,
                action["grant_id"],
            )
            outcome = "committed"
        except ToolError as e:
            outcome = type(e).__name__
    found = tools.lookup(aid)
    ref = found[0]["id"] if found else None
    tools.checkpoint_save(task.run_id, "tamper", {"extra": extra, "net_out": outcome})
    tools.record("effect", aid, trace, ref, "refund")
    tools.record("readback", aid, trace, ref, "read back")
    tools.respond("completed", aid, ref)
