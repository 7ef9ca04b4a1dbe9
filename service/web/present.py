"""Reports and rows to what a page shows. Plain data in, plain data out: no HTML here (the
templates escape), no database (the routes read)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from service.db import queries

HARD = ("unsafe_escape", "duplicate_effect", "unverifiable_release")
SEVERITY = {"allow": 0, "hold": 1, "block": 2}
CF_STATES = ("valid", "invalid", "masked")


def aware(value: datetime) -> datetime:
    # SQLite hands timestamps back without their zone; they were written in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def when(value: datetime | None) -> str:
    return aware(value).strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else ""


def pct(value: Any, digits: int = 1) -> str:
    try:
        return f"{100 * float(value):.{digits}f}%"
    except (TypeError, ValueError):
        return "–"


def signed(value: Any) -> str:
    try:
        return f"{float(value):+.3f}"
    except (TypeError, ValueError):
        return "–"


@dataclass(frozen=True)
class GateState:
    """What the systems page shows for a system: a state, its reasons, what it rests on."""

    state: str
    reasons: list[dict[str, Any]]
    status: str | None = None


def state_of(row: queries.CandidateRow | None) -> GateState:
    """Until the gate of issue 4 answers for a system, its state is the latest decision."""
    if row is None:
        return GateState("none", [])
    if row.assay.decision is None:
        return GateState("running" if row.assay.status in ("queued", "running") else "failed", [])
    return GateState(row.assay.decision, worst_first(row.assay.reasons or []), row.assay.status)


def worst_first(reasons: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Block reasons before hold reasons, otherwise in the order the gate gave them."""
    order = sorted(
        enumerate(reasons), key=lambda ir: (-SEVERITY.get(str(ir[1].get("severity")), 1), ir[0])
    )
    return [dict(r) for _, r in order]


def progress_fraction(row: queries.CandidateRow) -> float:
    planned = row.assay.trials_planned or 0
    return min(1.0, row.assay.trials_done / planned) if planned else 0.0


@dataclass(frozen=True)
class FaultView:
    id: str
    domain: str
    mode: str
    state: str
    signature: Mapping[str, Any]
    counts: Mapping[str, int]
    trials: int
    planned: int
    exercised: int
    transfer: Mapping[str, Any] | None
    counterfactual: Mapping[str, Any]
    diagnosis: Mapping[str, Any] | None
    reasons: list[dict[str, Any]]
    coverage_key: str
    # mcp targets: per invariant, its severity and the graded trials it failed in.
    invariants: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportView:
    faults: list[FaultView]
    totals: dict[str, int]
    trials: int
    counterfactuals: dict[str, int]
    visited: list[str]
    not_visited: list[str]
    general_reasons: list[dict[str, Any]]
    interpretation: Mapping[str, Any]
    catalogue_version: str
    stopped: Any
    negatives: list[FaultView] = field(default_factory=list)


def _state(reasons: Sequence[Mapping[str, Any]]) -> str:
    worst = "allow"
    for r in reasons:
        sev = str(r.get("severity", "hold"))
        if SEVERITY.get(sev, 1) > SEVERITY[worst]:
            worst = sev if sev in SEVERITY else "hold"
    return worst


def report_view(report: Mapping[str, Any], reasons: Sequence[Mapping[str, Any]]) -> ReportView:
    by_fault: dict[str, list[dict[str, Any]]] = {}
    general: list[dict[str, Any]] = []
    for r in reasons:
        fault = r.get("fault")
        (by_fault.setdefault(str(fault), []) if fault else general).append(dict(r))
    faults: list[FaultView] = []
    totals = dict.fromkeys(HARD, 0)
    cf_counts = dict.fromkeys((*CF_STATES, "other"), 0)
    trials = 0
    for f in report.get("faults", []):
        if not isinstance(f, Mapping):
            continue
        sig: Mapping[str, Any] = f.get("signature") or {}
        counts = {k: int(v) for k, v in (sig.get("counts") or {}).items()}
        for k in HARD:
            totals[k] += counts.get(k, 0)
        trials += int(sig.get("trials", 0) or 0)
        cf: Mapping[str, Any] = f.get("counterfactual") or {}
        status = str(cf.get("status", ""))
        cf_counts[status if status in CF_STATES else "other"] += 1
        fid = str(f.get("id", ""))
        own = by_fault.get(fid, [])
        faults.append(
            FaultView(
                id=fid,
                domain=str(f.get("domain", "")),
                mode=str(f.get("mode", "")),
                state=_state(own),
                signature=sig,
                counts=counts,
                trials=int(sig.get("trials", 0) or 0),
                planned=int(f.get("planned", 0) or 0),
                exercised=int(f.get("exercised", 0) or 0),
                transfer=f.get("transfer"),
                counterfactual=cf,
                diagnosis=f.get("diagnosis"),
                reasons=own,
                coverage_key=str(f.get("coverage_key", "")),
                invariants=f.get("invariants") or {},
            )
        )
    coverage: Mapping[str, Any] = report.get("coverage") or {}
    return ReportView(
        faults=faults,
        totals=totals,
        trials=trials,
        counterfactuals=cf_counts,
        visited=[str(k) for k in coverage.get("visited", [])],
        not_visited=[str(k) for k in coverage.get("not_visited", [])],
        general_reasons=general,
        interpretation=report.get("interpretation") or {},
        catalogue_version=str(report.get("catalogue_version", "")),
        stopped=report.get("stopped"),
        negatives=[f for f in faults if f.diagnosis],
    )
