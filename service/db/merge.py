"""Merging an assay once every shard is stored: the merged report and the per-fault results,
recorded only while the assay is open, so of any number of racing callers one wins and the others
change nothing. An earlier attempt of the same release that blocked on evidence of a violation
blocks this one too (`service.core.decision.release`), and its floors on the lower bound are
read on what every attempt of the release graded: re-running the same code buys no new draw.
The signed dossier version that goes with it is the application's
(`service.app.dossiers.decide`), in the same transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from service.core.decision.release import carry, earlier_records
from service.core.evidence.quota import Cut, Quota, cut_report
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import ShardResult, merge
from service.core.system.manifest import Manifest
from service.db import queries
from service.db import release as releases
from service.db.assay import FaultResultValues, ready_to_merge, record_report


@dataclass(frozen=True)
class Merged:
    """`won`: this call recorded the report (else another caller had)."""

    decision: str
    won: bool
    report: dict[str, Any]


def record_merge(
    session: Session,
    assay_id: uuid.UUID,
    manifest: Manifest,
    plan: AssayPlan,
    quota: Quota,
) -> Merged | None:
    """Merge and record the report if every shard is stored and nobody has; None otherwise.
    The report is cut to `quota` before it is written, and says what the shards' stores and
    this cut (`cut`). The caller commits."""
    if not ready_to_merge(session, assay_id):
        return None
    results = queries.done_shard_results(session, assay_id)
    # The release's earlier attempts first: its floors are read on what they graded too.
    release = releases.lock(session, assay_id)
    earlier = releases.attempts(session, release, excluding=assay_id)
    shard_results = [ShardResult.from_dict(r) for r in results]
    merged = merge(manifest, plan, shard_results, earlier=earlier_records(earlier))
    shards = Cut()
    for r in results:
        shards.add(r.get("cut"))
    report = cut_report(carry(merged.to_dict(), earlier), quota, shards)
    decision = str(report["decision"])
    won = record_report(
        session, assay_id, decision=decision, report=report, faults=fault_rows(report)
    )
    return Merged(decision, won, report)


def fault_rows(report: dict[str, Any]) -> list[FaultResultValues]:
    """Split each fault of the report into its signature and its sampled trial evidence."""
    rows: list[FaultResultValues] = []
    for fault in report.get("faults", []):
        samples = fault.get("samples") or []
        rows.append(
            FaultResultValues(
                fault_id=str(fault["id"]),
                domain=fault.get("domain"),
                trials=int(fault.get("planned", 0)),
                signature={k: v for k, v in fault.items() if k != "samples"},
                evidence=list(samples),
            )
        )
    return rows
