"""Rows to public shapes, and the opaque pagination cursor."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from fastapi import Response

from service.api.errors import CursorInvalid
from service.api.schemas import (
    CandidatePublic,
    DossierRef,
    GateState,
    HoldPublic,
    Progress,
    SubjectPublic,
)
from service.app import gate
from service.app.candidates import CandidateView
from service.app.records import (
    Assay,
    AssayStatus,
    CandidateRow,
    Dossier,
    Hold,
    LiveProgress,
    as_utc,
    as_utc_or_none,
)
from service.app.reviews import HeldCandidate
from service.core.decision.gate import ReasonView, block_first, reason_view
from service.core.system.artifact import ArtifactSubject, written


def progress(assay: Assay, live: LiveProgress | None = None) -> Progress:
    """The assay's counters; with its live progress, what its workers are doing too (while it
    runs, and the runs it took once it is over)."""
    return Progress(
        shard_count=assay.shard_count,
        shards_done=assay.shards_done,
        trials_planned=assay.trials_planned,
        trials_done=assay.trials_done,
        runs_done=live.runs_done if live is not None else 0,
        gate_runs_done=live.gate_runs_done if live is not None else 0,
        slots_busy=live.slots_busy if live is not None else 0,
        waiting=(live.waiting or {}) if live is not None else {},
    )


def reasons(stored: Sequence[Mapping[str, object]] | None) -> list[ReasonView]:
    """Stored reasons as the API serves them: the one order, the four keys."""
    return [reason_view(r) for r in block_first(stored or [])]


def gate_state(found: gate.Standing) -> GateState:
    return GateState(
        decision=found.decision.value,
        basis=found.basis.value,
        reasons=found.reasons,
        dossier_version=found.dossier.version if found.dossier is not None else None,
        hold_id=found.hold_id,
        until=as_utc_or_none(found.until),
        waived=found.waived,
    )


def candidate_page(views: Sequence[CandidateView]) -> list[CandidatePublic]:
    return [candidate_public(view) for view in views]


def candidate_public(view: CandidateView) -> CandidatePublic:
    row = view.row
    return CandidatePublic(
        id=row.candidate.id,
        system=row.system.name,
        version=row.candidate.version,
        source_revision=row.candidate.source_revision,
        code=written(row.candidate.code_sha256) if row.candidate.code_sha256 else None,
        manifest_digest=row.candidate.manifest_digest,
        component_hashes=view.component_hashes,
        created_at=as_utc(row.candidate.created_at),
        submitted_by=row.candidate.submitted_by,
        assay_id=row.assay.id,
        status=AssayStatus(row.assay.status),
        progress=progress(row.assay, view.live),
        decision=row.assay.decision,
        reasons=reasons(row.assay.reasons),
        gate=gate_state(view.standing),
        error=failure(row.assay),
    )


def subject_public(subject: ArtifactSubject) -> SubjectPublic:
    return SubjectPublic(
        name=subject.name,
        digest=written(subject.sha256),
        assurance=subject.assurance.value,
        source=subject.source.value if subject.source is not None else None,
    )


def failure(assay: Assay) -> str | None:
    if assay.status != AssayStatus.FAILED or not assay.report:
        return None
    error = assay.report.get("error")
    return str(error) if error is not None else None


#: A page cursor: the last row's creation time (microseconds since the epoch, UTC) and its id.
#: Every string of this shape is a cursor, so the schema says exactly what is accepted.
CURSOR_PATTERN = r"^[0-9]{1,17}\.[0-9a-f]{32}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def encode_cursor(row: CandidateRow) -> str:
    created = as_utc(row.candidate.created_at)
    micros = (created - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}.{row.candidate.id.hex}"


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        micros, last_id = cursor.split(".", 1)
        return _EPOCH + timedelta(microseconds=int(micros)), uuid.UUID(hex=last_id)
    except (ValueError, OverflowError):
        raise CursorInvalid("not a cursor this service returned", field="cursor") from None


def dossier_ref(dossier: Dossier) -> DossierRef:
    return DossierRef(
        id=dossier.id,
        candidate_id=dossier.candidate_id,
        version=dossier.version,
        digest=dossier.digest,
        previous=dossier.previous,
        decision=dossier.decision,
        reasons=reasons(dossier.reasons),
        change=dossier.change,
        keyid=dossier.keyid,
        created_at=as_utc(dossier.created_at),
    )


def dossier_response(dossier: Dossier) -> Response:
    """The dossier with its envelope spliced in as stored: the bytes are never re-serialised."""
    meta = dossier_ref(dossier).model_dump_json()
    body = meta[:-1] + ',"envelope":' + dossier.envelope + "}"
    return Response(body, media_type="application/json")


def hold_public(hold: Hold, about: HeldCandidate) -> HoldPublic:
    return HoldPublic(
        id=hold.id,
        candidate_id=hold.candidate_id,
        system=about.system,
        version=about.version,
        dossier_id=hold.dossier_id,
        status=hold.status,
        reasons=reasons(hold.reasons),
        reviewer=hold.reviewer,
        reviewed_by=hold.reviewed_by,
        review_reason=hold.review_reason,
        reviewed_at=as_utc_or_none(hold.reviewed_at),
        expires_at=as_utc_or_none(hold.expires_at),
        created_at=as_utc(hold.created_at),
    )
