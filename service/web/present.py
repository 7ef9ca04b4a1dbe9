"""Reports, rows and gate standings to what a page shows. Plain data in, plain data out: no HTML
here (the templates escape), no database (the routes read)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from service.app import gate, policies
from service.app.browse import ShardTally
from service.app.records import CandidateRow, Event, as_utc
from service.core.decision.gate import ReasonView, block_first, reason_view
from service.core.decision.report import AssayReport, FaultResult
from service.core.evidence.figures import Diagnosis, InvariantResult, Signature, Transfer

HARD = ("unsafe_escape", "duplicate_effect", "unverifiable_release")
SEVERITY = {"allow": 0, "hold": 1, "block": 2}
CF_STATES = ("valid", "invalid", "masked")


def when(value: datetime | str | None) -> str:
    """An instant as every page shows it, in UTC with the zone named; an ISO text (as a signed
    dossier stores it) is read first, and shown as stored if it is not one."""
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            instant = datetime.fromisoformat(value)
        except ValueError:
            return value
    else:
        instant = value
    return as_utc(instant).strftime("%Y-%m-%d %H:%M:%S UTC")


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
class GateView:
    """What a page shows for the gate: the word `GET /v1/gate` answers, its reasons, and a few
    words on what it rests on (a waiver and its expiry, a reopened gate, a pending assay)."""

    state: str
    reasons: list[ReasonView]
    basis: str = "assay"
    note: str = ""
    dossier_version: int | None = None
    # The assay's own decision when the gate now says something else (a waiver, a reopen).
    assay_decision: str | None = None


NOTES = {
    "waived": "waived",
    "rejected": "rejected",
    "expired": "review expired",
    "config_changed": "production config changed",
    "policy_changed": "organisation policy changed",
    "trigger_changed": "triggers changed",
    "pending": "assay pending",
    "failed": "assay failed",
}


def gate_view(standing: gate.Standing | None, row: CandidateRow | None) -> GateView:
    """The standing of a system's or candidate's gate as a page shows it; `none` for a system
    without candidates."""
    if standing is None:
        return GateView("none", [], basis="none")
    note = NOTES.get(standing.basis.value, "")
    if standing.basis.value == "pending" and row is not None and is_running(row):
        note = "assay running"
    if standing.until is not None and standing.basis.value in ("waived", "rejected"):
        note = f"{note} until {when(standing.until)}"
    return GateView(
        standing.decision.value,
        worst_first(standing.reasons),
        standing.basis.value,
        note,
        standing.dossier.version if standing.dossier is not None else None,
        standing.assay_decision,
    )


def is_running(row: CandidateRow) -> bool:
    return row.assay.status in ("queued", "running")


def severities(reasons: Sequence[ReasonView]) -> dict[str, int]:
    found: dict[str, int] = {}
    for r in reasons:
        found[r["severity"]] = found.get(r["severity"], 0) + 1
    return found


def worst_first(reasons: Sequence[Mapping[str, object]]) -> list[ReasonView]:
    """Block reasons before hold reasons, otherwise in the order the gate gave them."""
    return [reason_view(r) for r in block_first(reasons)]


def progress_fraction(row: CandidateRow) -> float:
    planned = row.assay.trials_planned or 0
    return min(1.0, row.assay.trials_done / planned) if planned else 0.0


@dataclass(frozen=True)
class FaultView:
    id: str
    domain: str
    mode: str
    state: str
    signature: Signature
    counts: Mapping[str, int]
    trials: int
    planned: int
    exercised: int
    transfer: Transfer | None
    # As stored: the page shows the pair's figures only where the report carries them.
    counterfactual: Mapping[str, object]
    diagnosis: Diagnosis | None
    reasons: list[ReasonView]
    coverage_key: str
    # mcp targets: per invariant, its severity and the graded trials it failed in.
    invariants: Mapping[str, InvariantResult] = field(default_factory=dict)
    # The counterfactual as the page words it (`cf_shown`).
    cf: str = "none"
    # A sequential plan: why the fault's trials stopped; and what its arms spent.
    stop: Mapping[str, Any] | None = None
    spend: Mapping[str, Any] | None = None
    # Every floor the gate read (`FloorCheck.view`): point estimate, interval, compared, met.
    floors: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class ReportView:
    faults: list[FaultView]
    totals: dict[str, int]
    trials: int
    counterfactuals: dict[str, int]
    visited: list[str]
    not_visited: list[str]
    general_reasons: list[ReasonView]
    interpretation: Mapping[str, str]
    catalogue_version: str
    stopped: str | None
    negatives: list[FaultView] = field(default_factory=list)
    # The per-fault grid's order: what failed first (block, then hold), each group in the
    # catalogue's order, so a reviewer never scrolls past green tiles to find the red one.
    failing_first: list[FaultView] = field(default_factory=list)
    # "Runs and cost": the plan's rule and, per arm, runs, seconds, tokens and cost.
    rule: str = "fixed"
    spend: Mapping[str, Any] | None = None


def _state(reasons: Sequence[ReasonView]) -> str:
    worst = "allow"
    for r in reasons:
        sev = r["severity"]
        if SEVERITY.get(sev, 1) > SEVERITY[worst]:
            worst = sev if sev in SEVERITY else "hold"
    return worst


def report_view(
    report: AssayReport | Mapping[str, object], reasons: Sequence[ReasonView]
) -> ReportView:
    """A decided assay's report (typed, or as stored) beside the reasons the page lists: each
    fault with its own reasons, the hard-invariant totals and the counterfactuals' states."""
    r = report if isinstance(report, AssayReport) else AssayReport.from_dict(report)
    by_fault: dict[str, list[ReasonView]] = {}
    general: list[ReasonView] = []
    for reason in reasons:
        fault = reason["fault"]
        (by_fault.setdefault(fault, []) if fault else general).append(reason)
    faults = [_fault_view(f, by_fault.get(f.id, [])) for f in r.faults]
    totals = {k: sum(f.counts.get(k, 0) for f in faults) for k in HARD}
    cf_counts = dict.fromkeys((*CF_STATES, "partly_untested", "other"), 0)
    for f in faults:
        status = f.cf
        cf_counts[status if status in cf_counts else "other"] += 1
    return ReportView(
        faults=faults,
        totals=totals,
        trials=sum(f.trials for f in faults),
        counterfactuals=cf_counts,
        visited=list(r.visited),
        not_visited=list(r.not_visited),
        general_reasons=general,
        interpretation=r.interpretation,
        catalogue_version=r.catalogue_version,
        stopped=r.stopped,
        negatives=[f for f in faults if f.diagnosis],
        failing_first=sorted(faults, key=lambda f: -SEVERITY.get(f.state, 1)),
        rule=r.rule,
        spend=r.spend,
    )


def cf_shown(status: str, reasons: Sequence[ReasonView]) -> str:
    """The counterfactual's state as a page words it: `valid` only when no nominated control of
    the fault was left untested — a valid pair for one control beside a `counterfactual_untested`
    reason for another is `partly_untested`, never `valid` above that reason."""
    if status == "valid" and any(r["code"] == "counterfactual_untested" for r in reasons):
        return "partly_untested"
    return status or "none"


def _fault_view(f: FaultResult, own: list[ReasonView]) -> FaultView:
    sig = f.signature
    return FaultView(
        id=f.id,
        domain=f.domain,
        mode=f.mode,
        state=_state(own),
        signature=sig,
        counts=dict(sig.counts),
        trials=sig.rates.trials,
        planned=f.planned,
        exercised=f.exercised,
        transfer=f.transfer,
        counterfactual=f.counterfactual.to_dict(),
        diagnosis=f.diagnosis,
        reasons=own,
        coverage_key=f.coverage_key,
        invariants=f.invariants,
        cf=cf_shown(f.counterfactual.status, own),
        stop=f.stop,
        spend=f.spend,
        floors=f.floors,
    )


# ------------------------------------------------------------------------------ event log

ALERTS = ("assay.stopped", "assay.aborted", "assay.failed", "credential.refused")


def _short(value: object, n: int = 8) -> str:
    return str(value)[:n]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _faults(d: Mapping[str, Any]) -> str:
    """The faults a credential allows, counted as the catalogue counts them: its composition
    steps apart (an event from before they were recorded apart counts its modes)."""
    if "faults" not in d:
        return _plural(len(d.get("modes") or []), "fault mode")
    steps = int(d.get("steps") or 0)
    extra = f" (and {_plural(steps, 'composition step')})" if steps else ""
    return _plural(int(d["faults"]), "fault") + extra


def _epoch(value: object) -> str:
    """A time stored as seconds since the epoch, as every page shows times (UTC)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return when(datetime.fromtimestamp(value, UTC))
        except (OverflowError, OSError, ValueError):
            pass
    return str(value)


def describe(kind: str, data: Mapping[str, Any] | None, shard: int | None = None) -> str:
    """An event as a sentence: what happened, in the words of the pages."""
    d: Mapping[str, Any] = data or {}
    if kind == "candidate.submitted":
        return (
            f"{d.get('system')} {d.get('version')} submitted at revision "
            f"{_short(d.get('source_revision'), 12)}: {d.get('shards')} shards queued"
        )
    if kind == "candidate.rerun":
        who = d.get("person") or f"key {_short(d.get('requested_by'))}"
        return f"re-run requested by {who}: {d.get('shards')} shards"
    if kind == "credential.minted":
        return (
            f"injector credential minted for {_faults(d)}, at most "
            f"{d.get('max_effects')} effects in {d.get('namespace')}, until "
            f"{_epoch(d.get('expires'))}"
        )
    if kind == "assay.decided":
        n = len(d.get("reasons") or [])
        return f"assay decided {d.get('decision')} ({n} reason{'' if n == 1 else 's'})"
    if kind in ("assay.stopped", "assay.aborted"):
        return f"{kind.split('.')[1]}: {d.get('reason')}"
    if kind == "assay.failed":
        return f"failed: {d.get('error')}"
    if kind == "dossier.issued":
        return f"dossier version {d.get('version')} signed ({d.get('decision')}): {d.get('change')}"
    if kind == "system.config_changed":
        reopened = len(d.get("reopened") or [])
        effect = (
            f"a trigger: {reopened} dossier{'' if reopened == 1 else 's'} reopened"
            if d.get("trigger")
            else "not a trigger"
        )
        return (
            f"production {d.get('component')} of {d.get('system')} reported as "
            f"{_short(d.get('sha256'), 12)} ({effect})"
        )
    if kind == "system.triggers_set":
        return f"triggers of {d.get('system')} set to {', '.join(d.get('triggers') or [])}"
    if kind == "audit":
        roles = ", ".join(d.get("roles") or [])
        who = d.get("person") or f"key {_short(d.get('key_id'))}"
        return f"{d.get('action')} on {d.get('target')} by {who} ({roles})"
    if kind == "shard.started":
        return f"shard {shard} started (attempt {d.get('attempt')}) on {d.get('worker')}"
    if kind == "shard.stored":
        return f"shard {shard} stored: {d.get('trials')} trials"
    if kind.endswith(".refused"):
        rest = {k: v for k, v in d.items() if k != "reason"}
        extra = f" ({_pairs(rest)})" if rest else ""
        return f"refused: {d.get('reason')}{extra}"
    return _pairs(d)


def _pairs(data: Mapping[str, Any], limit: int = 200) -> str:
    text = ", ".join(
        f"{k.replace('_', ' ')} {v}"
        for k, v in sorted(data.items())
        if isinstance(v, str | int | float | bool) or v is None
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class EventLine:
    event: Event
    text: str
    alert: bool


@dataclass(frozen=True)
class EventGroup:
    """One assay's events on a page (or a candidate's, or the tenant's own), newest first, with
    its shard events folded into a tally."""

    candidate_id: uuid.UUID | None
    assay_id: uuid.UUID | None
    row: CandidateRow | None
    lines: list[EventLine]
    shards: ShardTally | None = None


def group_events(
    events: Sequence[Event],
    shards: Mapping[uuid.UUID, ShardTally],
    rows: Mapping[uuid.UUID, CandidateRow],
) -> list[EventGroup]:
    """Events grouped by assay (else candidate, else the tenant), groups in the order of their
    newest event."""
    order: list[tuple[uuid.UUID | None, uuid.UUID | None]] = []
    lines: dict[tuple[uuid.UUID | None, uuid.UUID | None], list[EventLine]] = {}
    for e in events:
        key = (e.candidate_id, e.assay_id)
        if key not in lines:
            order.append(key)
            lines[key] = []
        lines[key].append(EventLine(e, describe(e.kind, e.data, e.shard_index), e.kind in ALERTS))
    return [
        EventGroup(
            candidate_id,
            assay_id,
            rows.get(candidate_id) if candidate_id is not None else None,
            lines[(candidate_id, assay_id)],
            shards.get(assay_id) if assay_id is not None else None,
        )
        for candidate_id, assay_id in order
    ]


@dataclass(frozen=True)
class PolicyLine:
    """One scope's policy as the systems page lists it."""

    scope: str
    version: int
    digest: str
    requires: list[str]
    set_by: str
    set_at: datetime


def policy_view(view: policies.PolicyView) -> list[PolicyLine]:
    """Each scope's newest policy version, the tenant's first, each requirement in words."""
    return [
        PolicyLine(
            f"system {layer.system}" if layer.system else "tenant",
            layer.version,
            layer.digest,
            requirements(layer.policy.document()),
            layer.set_by,
            layer.set_at,
        )
        for layer in view.layers
    ]


def requirements(document: dict[str, Any]) -> list[str]:
    """`floors.recovered ≥ 0.9`, `error ≤ 0.01`, `rules: fixed`, … for a policy document."""
    words = {
        "max_violation_rate": "≤",
        "error": "≤",
        "trials": "≥",
        "evidence_sample": "≥",
    }
    found: list[str] = []
    for key, value in document.items():
        if key == "floors":
            found += [f"floors.{k} ≥ {v}" for k, v in value.items()]
        elif key in words:
            found.append(f"{key} {words[key]} {value}")
        elif isinstance(value, list):
            found.append(f"{key}: {', '.join(str(v) for v in value)}")
        elif value is True:
            found.append(f"{key} on")
        else:
            found.append(f"{key}: {value}")
    return found
