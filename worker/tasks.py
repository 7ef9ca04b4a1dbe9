"""Tasks are thin: take ids, load, call the core, persist. Each is idempotent on its own key."""

from __future__ import annotations

import logging
import os
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.core.assay import ShardResult, ShardSpec, merge, run_shard
from service.core.manifest import Manifest, parse_manifest
from service.core.plan import AssayPlan, parse_plan
from service.db import queries
from service.db.assay import (
    AssayInputs,
    FaultRow,
    assay_inputs,
    begin_shard,
    fail_assay,
    ready_to_merge,
    record_report,
    store_shard_result,
)
from service.db.session import make_engine, session_scope
from service.settings import Settings

log = logging.getLogger("assaygate.worker")

RUN_SHARD = "assay.run_shard"


@dataclass(frozen=True)
class Parsed:
    """An assay's inputs, parsed once per process and reused by each of its shards."""

    inputs: AssayInputs
    manifest: Manifest
    plan: AssayPlan


class WorkerContext:
    """Per-process resources, created on first use so a prefork child never shares its parent's
    database connections."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._engine: Engine | None = None
        self._pid = 0
        self._assays: OrderedDict[uuid.UUID, Parsed] = OrderedDict()

    @property
    def engine(self) -> Engine:
        if self._engine is None or self._pid != os.getpid():
            self._engine = make_engine(self.settings)
            self._pid = os.getpid()
            self._assays.clear()
        return self._engine

    def assay(self, session: Session, assay_id: uuid.UUID) -> Parsed | None:
        """The parsed inputs of an assay, refusing a stored manifest whose digest moved."""
        cached = self._assays.get(assay_id)
        if cached is not None:
            self._assays.move_to_end(assay_id)
            return cached
        inputs = assay_inputs(session, assay_id)
        if inputs is None:
            return None
        manifest = parse_manifest(inputs.manifest)
        if manifest.digest() != inputs.manifest_digest:
            raise RuntimeError(
                f"stored manifest {inputs.manifest_digest} re-parses to {manifest.digest()}"
            )
        parsed = Parsed(inputs, manifest, parse_plan(inputs.plan))
        self._assays[assay_id] = parsed
        if len(self._assays) > 256:
            self._assays.popitem(last=False)
        return parsed


def register(app: Celery, ctx: WorkerContext) -> None:
    @app.task(name=RUN_SHARD, bind=True, acks_late=True, reject_on_worker_lost=True)
    def run_shard_task(self: Task[Any, Any], assay_id: str, shard_index: int) -> dict[str, Any]:
        return execute_shard(ctx, uuid.UUID(assay_id), shard_index, self.request.hostname or "")


def execute_shard(
    ctx: WorkerContext, assay_id: uuid.UUID, shard_index: int, worker: str
) -> dict[str, Any]:
    ids: dict[str, Any] = {"assay_id": str(assay_id), "shard": shard_index, "worker": worker}
    outcome: dict[str, Any] = {"assay_id": str(assay_id), "shard": shard_index, "stored": False}
    with session_scope(ctx.engine) as session:
        parsed = ctx.assay(session, assay_id)
        start = begin_shard(session, parsed.inputs, shard_index, worker) if parsed else None
    if parsed is None:
        log.warning("shard of an unknown assay dropped", extra=ids)
        return {**outcome, "decision": None}
    ids["candidate_id"] = str(parsed.inputs.candidate_id)
    if start is None:
        log.info("shard already stored", extra=ids)
        with Session(ctx.engine) as session:
            complete = ready_to_merge(session, assay_id)
    else:
        try:
            result = run_shard(parsed.manifest, parsed.plan, ShardSpec.from_dict(start.spec))
        except Exception as exc:
            log.exception("shard failed", extra=ids)
            with session_scope(ctx.engine) as session:
                fail_assay(session, assay_id, f"shard {shard_index}: {exc}")
            raise
        with session_scope(ctx.engine) as session:
            stored = store_shard_result(
                session, parsed.inputs, shard_index, result.to_dict(), result.trials
            )
        outcome["stored"] = stored.written
        complete = stored.complete
        log.info(
            "shard stored" if stored.written else "shard result already stored; discarded",
            extra={**ids, "trials": result.trials},
        )
    decision = finalize(ctx, parsed) if complete else None
    return {**outcome, "decision": decision}


def finalize(ctx: WorkerContext, parsed: Parsed) -> str | None:
    """Merge once every shard is stored. Safe to call from any number of workers at once: the
    report is written only by the first, the others find the assay done and change nothing."""
    assay_id = parsed.inputs.assay_id
    with Session(ctx.engine) as session:
        if not ready_to_merge(session, assay_id):
            return None
        results = queries.done_shard_results(session, assay_id)
    report = merge(
        parsed.manifest, parsed.plan, [ShardResult.from_dict(r) for r in results]
    ).to_dict()
    decision = str(report["decision"])
    with session_scope(ctx.engine) as session:
        won = record_report(
            session, assay_id, decision=decision, report=report, faults=fault_rows(report)
        )
    if won:
        log.info(
            "assay decided",
            extra={
                "assay_id": str(assay_id),
                "candidate_id": str(parsed.inputs.candidate_id),
                "decision": decision,
            },
        )
    return decision


def fault_rows(report: dict[str, Any]) -> list[FaultRow]:
    """Split each fault of the report into its signature and its sampled trial evidence."""
    rows: list[FaultRow] = []
    for fault in report.get("faults", []):
        samples = fault.get("samples") or []
        rows.append(
            FaultRow(
                fault_id=str(fault["id"]),
                domain=fault.get("domain"),
                trials=int(fault.get("planned", 0)),
                signature={k: v for k, v in fault.items() if k != "samples"},
                evidence=list(samples),
            )
        )
    return rows
