"""Tasks are thin: take ids, load, call the core, persist. Each is idempotent on its own key."""

from __future__ import annotations

import logging
import os
import uuid
from collections import OrderedDict
from typing import Any

from celery import Celery, Task
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.core.assay import ShardResult, ShardSpec, merge, run_shard
from service.core.manifest import Manifest, parse_manifest
from service.core.plan import parse_plan
from service.db import queries
from service.db.assay import (
    FaultRow,
    begin_shard,
    fail_assay,
    ready_to_merge,
    record_report,
    store_shard_result,
)
from service.db.models import Assay, Candidate
from service.db.models import Manifest as ManifestRow
from service.db.session import make_engine, session_scope
from service.settings import Settings

log = logging.getLogger("assaygate.worker")

RUN_SHARD = "assay.run_shard"


class WorkerContext:
    """Per-process resources, created on first use so a prefork child never shares its parent's
    database connections."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._engine: Engine | None = None
        self._pid = 0
        self._manifests: OrderedDict[str, Manifest] = OrderedDict()

    @property
    def engine(self) -> Engine:
        if self._engine is None or self._pid != os.getpid():
            self._engine = make_engine(self.settings)
            self._pid = os.getpid()
        return self._engine

    def manifest(self, digest: str, document: dict[str, Any]) -> Manifest:
        """Parse a stored manifest once per process, and refuse one whose digest moved."""
        cached = self._manifests.get(digest)
        if cached is None:
            cached = parse_manifest(document)
            if cached.digest() != digest:
                raise RuntimeError(f"stored manifest {digest} re-parses to {cached.digest()}")
            self._manifests[digest] = cached
            if len(self._manifests) > 64:
                self._manifests.popitem(last=False)
        return cached


def register(app: Celery, ctx: WorkerContext) -> None:
    @app.task(name=RUN_SHARD, bind=True, acks_late=True, reject_on_worker_lost=True)
    def run_shard_task(self: Task[Any, Any], assay_id: str, shard_index: int) -> dict[str, Any]:
        return execute_shard(ctx, uuid.UUID(assay_id), shard_index, self.request.hostname or "")


def execute_shard(
    ctx: WorkerContext, assay_id: uuid.UUID, shard_index: int, worker: str
) -> dict[str, Any]:
    ids: dict[str, Any] = {"assay_id": str(assay_id), "shard": shard_index, "worker": worker}
    with session_scope(ctx.engine) as session:
        job = begin_shard(session, assay_id, shard_index, worker)
    stored = False
    if job is None:
        log.info("shard already done or unknown", extra=ids)
    else:
        ids["candidate_id"] = str(job.candidate_id)
        try:
            manifest = ctx.manifest(job.manifest_digest, job.manifest)
            result = run_shard(manifest, parse_plan(job.plan), ShardSpec.from_dict(job.spec))
        except Exception as exc:
            log.exception("shard failed", extra=ids)
            with session_scope(ctx.engine) as session:
                fail_assay(session, assay_id, f"shard {shard_index}: {exc}")
            raise
        with session_scope(ctx.engine) as session:
            stored = store_shard_result(
                session, assay_id, shard_index, result.to_dict(), result.trials
            )
        log.info(
            "shard stored" if stored else "shard result already stored; discarded",
            extra={**ids, "trials": result.trials},
        )
    decision = finalize(ctx, assay_id)
    return {"assay_id": str(assay_id), "shard": shard_index, "stored": stored, "decision": decision}


def finalize(ctx: WorkerContext, assay_id: uuid.UUID) -> str | None:
    """Merge once every shard is stored. Safe to call from any number of workers at once."""
    with Session(ctx.engine) as session:
        if not ready_to_merge(session, assay_id):
            return None
        assay = session.get(Assay, assay_id)
        candidate = session.get(Candidate, assay.candidate_id) if assay else None
        row = session.get(ManifestRow, candidate.manifest_digest) if candidate else None
        if assay is None or candidate is None or row is None:
            return None
        results = queries.done_shard_results(session, assay_id)
        manifest = ctx.manifest(row.digest, row.document)
        plan = parse_plan(assay.plan)
    report = merge(manifest, plan, [ShardResult.from_dict(r) for r in results]).to_dict()
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
                "candidate_id": str(candidate.id),
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
