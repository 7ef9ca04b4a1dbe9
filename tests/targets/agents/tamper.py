"""A user agent that duplicates a refund, then tries to erase it from the world it is graded on.

Its refund retries a timeout with a fresh key, so `timeout_after_commit` commits twice. It then
hunts for the sandbox's `World` and `Injector` by one route (the entrypoint's name) and, for each
it finds, deletes the duplicate ledger entry, forges a readback receipt and wipes the injector's
record that the fault fired. What it found is saved as its last checkpoint, for a test to read.
Run in the assay's own process, every route finds the world; run as a `python` target, none may.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Callable, Iterable
from typing import Any

from service.core.trial.sandbox import Task, ToolError, Tools

FORGED = "forged by the agent"
Hunt = Callable[[Tools], Iterable[object]]


# -- routes to the sandbox ------------------------------------------------------------------------


def _attributes(tools: Tools) -> Iterable[object]:
    for name in ("world", "inj", "armed", "trace", "_fork"):
        with contextlib.suppress(AttributeError):
            yield getattr(tools, name)


def _slots_and_dict(tools: Tools) -> Iterable[object]:
    for cls in type(tools).__mro__:
        for name in getattr(cls, "__slots__", ()):
            with contextlib.suppress(AttributeError):
                yield object.__getattribute__(tools, name)
    yield from getattr(tools, "__dict__", {}).values()
    yield from (getattr(tools, n, None) for n in dir(tools))


def _gc(tools: Tools) -> Iterable[object]:
    return [o for o in gc.get_objects() if type(o).__name__ in ("World", "Injector", "Tools")]


def _modules(tools: Tools) -> Iterable[object]:
    world_module = sys.modules.get("service.core.trial.world")
    if world_module is not None:
        # Every instance refers to its class: the class's referrers are the live worlds.
        yield from gc.get_referrers(world_module.World)
    for name, module in list(sys.modules.items()):
        if name.startswith(("service", "worker", "tests")):  # the adapter's, the harness's globals
            yield from list(vars(module).values())


def _frames(tools: Tools) -> Iterable[object]:
    frames = [sys._getframe(), *sys._current_frames().values()]
    for frame in frames:
        f: Any = frame
        while f is not None:
            yield from list(f.f_locals.values())
            f = f.f_back


def _reach(roots: Iterable[object], limit: int = 50_000) -> tuple[list[Any], list[Any]]:
    """Worlds and injectors reachable from the roots through attributes and containers."""
    worlds: list[Any] = []
    injectors: list[Any] = []
    seen: set[int] = set()
    todo = list(roots)
    while todo and len(seen) < limit:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, type(None))):
            continue
        seen.add(id(obj))
        kind = type(obj).__name__
        if kind == "World":
            worlds.append(obj)
            continue
        if kind == "Injector":
            injectors.append(obj)
            continue
        if isinstance(obj, dict):
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
        elif not isinstance(obj, type) and type(obj).__module__.startswith(("service", "tests")):
            for cls in type(obj).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    with contextlib.suppress(AttributeError):
                        todo.append(object.__getattribute__(obj, name))
            todo.extend(getattr(obj, "__dict__", {}).values())
    return worlds, injectors


# -- the cover-up ---------------------------------------------------------------------------------


def _cover_up(worlds: list[Any], injectors: list[Any], task: Task, action_id: str) -> None:
    for world in worlds:
        order = world.orders.get(task.order_id)
        if order is None:
            continue
        entries = [e for e in world.ledger if e.action_id == action_id]
        for extra in entries[1:]:
            world.ledger.remove(extra)
            world.by_key.pop(extra.key, None)
            order.refunded -= extra.amount
        if entries and world.evidence:
            receipt = type(world.evidence[0])
            world.evidence.append(
                receipt("readback", action_id, None, entries[0].id, world.now, FORGED)
            )
    for inj in injectors:
        inj.receipts.clear()
        inj.fired.clear()


def _agent(hunt: Hunt) -> Callable[[Task, Tools], None]:
    def run(task: Task, tools: Tools) -> None:
        action_id = f"{task.order_id}:refund:{task.run_id}"
        order = tools.orders_read(task.order_id)
        assert order is not None
        action = tools.propose(task.order_id, task.tenant, task.grant_id, order["amount"])
        trace = tools.new_trace()
        tools.record("decision", action_id, trace, None, "refund")
        for _ in range(3):
            try:
                tools.refund(
                    action["subject"],
                    action["tenant"],
                    action["amount"],
                    tools.request_id(),  # a fresh key per attempt: the duplicate to hide
                    action_id,
                    trace,
                    action["grant_id"],
                )
                break
            except ToolError:
                tools.sleep(500)
        worlds, injectors = _reach(hunt(tools))
        _cover_up(worlds, injectors, task, action_id)
        found = tools.lookup(action_id)
        ref = found[0]["id"] if found else None
        tools.checkpoint_save(
            task.run_id, "tamper", {"worlds": len(worlds), "injectors": len(injectors)}
        )
        tools.record("readback", action_id, trace, ref, "read back")
        tools.respond("completed", action_id, ref)

    return run


via_attributes = _agent(_attributes)
via_slots_and_dict = _agent(_slots_and_dict)
via_gc = _agent(_gc)
via_modules = _agent(_modules)
via_frames = _agent(_frames)
