"""A worker holding several shards of one assay at once, run by the one scheduler on its engine's
slots (`service.core.shards.held`), so a shard with few trials, or a sequential fault (one trial at
a time), never leaves the worker's slots idle while the assay's other shards wait in the queue.

Each held shard is begun as its own message would begin it (`shards.begin`: its own lease,
attempt, injector state and code refusal), renewed by the one heartbeat, and stored as it
finishes; as each finishes the worker begins one more of the assay's free shards in its place
(`take_free`), so the slots stay as busy as when it began while the assay has shards queued.
Their own messages, when a worker takes them, find the shard held by a live lease or stored, and
are acknowledged; if this worker dies, the leases lapse and the reconciler sends each shard again
(worker.reconciler), so a shard held but never run is never stranded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from service.app import shards
from service.app.shards import InjectorState, ShardStart, Stored
from service.core.evidence.spend import Meter
from service.core.evidence.stopping import Watch, watch_for
from service.core.evidence.tally import ShardResult
from service.core.shards.assay import ShardSpec
from service.core.shards.held import run_held
from service.core.shards.slots import slots_of
from service.core.signing.credential import InjectorScope
from service.core.trial.engine import SlottedEngine
from worker.context import Parsed, WorkerContext
from worker.heartbeat import EngineWatch, Heartbeat
from worker.steps import (
    TRANSIENT,
    admit,
    code_refusal,
    fail_assay,
    guard_target,
    retrying,
    settle,
    spent,
    store_result,
)

log = logging.getLogger("assaygate.worker")

#: A begun shard: its index, its lease's start and the injector's state it was begun under.
Begun = tuple[int, ShardStart, InjectorState]


def hold_more(ctx: WorkerContext, parsed: Parsed, lead: Begun, worker: str) -> list[Begun]:
    """Begin more of the assay's shards to run with `lead`, on an engine with slots to spare:
    until the held shards can fill the slots (a sequential fault's shard fills one, a fixed
    shard as many as its trials) and at most `worker_slots` shards in all. None when the
    engine offers no slots, the lead is a paper shard, or the assay is stopping. A worker
    holds only what it can run at once, so the assay's other shards stay free for other
    workers."""
    settings, inputs = ctx.settings, parsed.inputs
    index, start, state = lead
    spec = ShardSpec.from_dict(start.spec)
    if settings.worker_slots < 2 or spec.fault_id is None or state.stop_reason is not None:
        return []
    try:
        target = ctx.target(inputs.assay_id, parsed.manifest, inputs)
    except Exception:  # the lead shard alone meets it again, and fails the assay with it
        return []
    if not isinstance(target, SlottedEngine):
        return []
    slots = slots_of(target.slots, settings.worker_slots)
    sequential = parsed.plan.rule_for(parsed.manifest.target.kind) == "sequential"

    def fills(s: ShardSpec) -> int:
        return 1 if sequential else s.stop - s.start

    room = slots - fills(spec)
    if room <= 0:
        return []
    ids: dict[str, Any] = {"assay_id": str(inputs.assay_id), "shard": index, "worker": worker}
    held: list[Begun] = []
    taken = {index}
    while room > 0 and len(held) + 1 < settings.worker_slots:
        got = take_free(ctx, parsed, worker, taken, ids)
        if got is None:
            break
        taken.add(got[0])
        held.append(got)
        room -= fills(ShardSpec.from_dict(got[1].spec))
    if held:
        together = ",".join(str(h[0]) for h in held)
        log.info("holding shards together", extra={**ids, "held": together})
    return held


def take_free(
    ctx: WorkerContext, parsed: Parsed, worker: str, taken: set[int], ids: dict[str, Any]
) -> Begun | None:
    """Begin one more of the assay's free shards, not one of `taken`, as its own message would
    begin it; None when none is free (another worker may have taken it first) or its code is
    refused."""
    settings, inputs = ctx.settings, parsed.inputs

    def free() -> list[int]:
        limit = settings.worker_slots + len(taken)
        return shards.free(
            ctx.engine, inputs.assay_id, limit=limit, max_attempts=settings.shard_max_attempts
        )

    for other in retrying(ctx, "list the free shards", ids, free):
        if other in taken:
            continue

        def begin(other: int = other) -> shards.Begun:
            return shards.begin(
                ctx.engine,
                inputs,
                other,
                worker,
                lease_s=settings.shard_lease_s,
                max_attempts=settings.shard_max_attempts,
                refusal=code_refusal(ctx, parsed),
            )

        begun = retrying(ctx, "start a held shard", {**ids, "shard": other}, begin)
        if begun.refused is not None:
            log.error("%s", begun.refused, extra={**ids, "shard": other})
            return None
        if begun.start is not None and begun.state is not None:
            return other, begun.start, begun.state
    return None


def run_and_store_held(
    ctx: WorkerContext, parsed: Parsed, group: list[Begun], ids: dict[str, Any], worker: str
) -> Stored:
    """Run the begun shards together under one heartbeat that renews every lease, storing each
    as it finishes; `written` is the first shard's, `complete` whether any store completed the
    assay. An engine that fails fails the assay; a database that fails hands the first
    shard's message back (the others' leases lapse, and the reconciler sends them again)."""
    assay_id = parsed.inputs.assay_id
    lead, lead_start, _ = group[0]
    written: dict[int, bool] = {}
    complete = [False]
    failed: list[Exception] = []

    def store(result: ShardResult) -> None:
        try:
            stored = store_result(ctx, parsed, result, ids)
        except TRANSIENT as exc:  # raised once the slots have stopped
            failed.append(exc)
            return
        written[result.index] = stored.written
        complete[0] = complete[0] or stored.complete

    engine = EngineWatch()
    others = [(index, start.attempt) for index, start, _ in group[1:]]
    taken = {index for index, _start, _state in group}
    with Heartbeat(
        ctx, assay_id, lead, lead_start.attempt, engine.activity, held=others
    ) as heartbeat:

        def more() -> list[tuple[ShardSpec, Watch | None]]:
            # One held shard finished: hold one more of the assay's free shards in its place,
            # so the slots stay as busy as when the worker began. Never raises: a store that
            # fails only means no more is held (the shard's own message or the reconciler runs
            # it).
            try:
                while (got := take_free(ctx, parsed, worker, taken, ids)) is not None:
                    index, start, state = got
                    taken.add(index)
                    heartbeat.hold(index, start.attempt)
                    spec = ShardSpec.from_dict(start.spec)
                    scope = admit(ctx, parsed, spec, state, {**ids, "shard": index})
                    if isinstance(scope, ShardResult):
                        store(scope)  # stopping, or a credential refused: stored as it is
                        return []
                    log.info("holding one more shard", extra={**ids, "held": index})
                    return [(spec, watch_for(parsed.manifest, parsed.plan, spec.fault_id))]
            except Exception:
                log.warning("no further shard held", exc_info=True, extra=ids)
            return []

        runnable: list[tuple[ShardSpec, InjectorScope]] = []
        for _index, start, state in group:
            spec = ShardSpec.from_dict(start.spec)
            scope = admit(ctx, parsed, spec, state, {**ids, "shard": spec.index})
            if isinstance(scope, ShardResult):
                store(scope)
            else:
                runnable.append((spec, scope))
        if runnable:
            try:
                run_together(ctx, parsed, runnable, group[-1][2], engine, store, ids, more)
            except TRANSIENT:
                raise
            except Exception as exc:
                fail_assay(ctx, parsed, f"shards {[s.index for s, _ in runnable]}", exc, ids)
                raise
    if failed:
        raise failed[0]
    return Stored(written.get(lead, False), complete[0])


def run_together(
    ctx: WorkerContext,
    parsed: Parsed,
    runnable: list[tuple[ShardSpec, InjectorScope]],
    state: InjectorState,
    engine: EngineWatch,
    store: Callable[[ShardResult], None],
    ids: dict[str, Any],
    more: Callable[[], list[tuple[ShardSpec, Watch | None]]] | None = None,
) -> None:
    """`service.core.shards.held.run_held` over the shards, under the assay's stop conditions
    (`state`: the latest read) and budgets (one meter, from what stored shards spent); each
    result gets its spend and an abort's words and is stored as it comes."""
    assay_id, manifest, plan = parsed.inputs.assay_id, parsed.manifest, parsed.plan
    target = ctx.target(assay_id, manifest, parsed.inputs)
    assert isinstance(target, SlottedEngine)
    engine.watch(target)
    scope = runnable[0][1]
    guard = guard_target(target, scope, state)

    def done(result: ShardResult, meter: Meter | None) -> None:
        store(settle(ctx, parsed, result, meter, {**ids, "shard": result.index}))

    run_held(
        manifest,
        plan,
        [(spec, watch_for(manifest, plan, spec.fault_id)) for spec, _ in runnable],
        target,
        slots_of(target.slots, ctx.settings.worker_slots),
        should_stop=ctx.stop_flag(assay_id),
        limits=shards.limits(state),
        guard=guard,
        namespace=scope.namespace,
        meter=Meter(time.monotonic, used=spent(ctx, parsed, ids)),
        shard_done=done,
        more=more,
    )
