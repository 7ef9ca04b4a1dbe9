"""Deciding an assay once every shard is stored: the merged report, the per-fault results and the
signed dossier version, in one transaction, written by whoever gets there first.

Called by the worker that stores the last shard, by a reconciler that finds an assay every shard
of which is stored but nobody merged, and by an abort that settles the last shards itself. Any
number may race: `record_report` writes only while the assay is open, so one wins and the others
change nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from service.core.assay import ShardResult, merge
from service.core.dossier import Signer
from service.core.manifest import Manifest
from service.core.plan import AssayPlan
from service.db import queries
from service.db.assay import FaultRow, ready_to_merge, record_report
from service.db.dossier import record_assay_dossier


@dataclass(frozen=True)
class Decided:
    """`won`: this call recorded the report and the dossier (else another caller had)."""

    decision: str
    won: bool


def decide(
    session: Session, signer: Signer, assay_id: uuid.UUID, manifest: Manifest, plan: AssayPlan
) -> Decided | None:
    """Merge and record the decision if every shard is stored and nobody has; None otherwise.
    The caller commits."""
    if not ready_to_merge(session, assay_id):
        return None
    results = queries.done_shard_results(session, assay_id)
    merged = merge(manifest, plan, [ShardResult.from_dict(r) for r in results])
    report = merged.to_dict()
    decision = merged.decision
    won = record_report(
        session, assay_id, decision=decision, report=report, faults=fault_rows(report)
    )
    if won:
        # In the same transaction: exactly one signed dossier version per finished assay.
        record_assay_dossier(session, signer, assay_id, report)
    return Decided(decision, won)


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
