from __future__ import annotations

import uuid

from fastapi import APIRouter

from service.api.errors import ERROR_RESPONSES
from service.api.present import progress, reasons
from service.api.schemas import AbortCreate, AbortPublic, AssayPublic, FaultPublic, Progress
from service.app import assays
from service.app.records import AssayStatus, as_utc, as_utc_or_none
from service.core.system.text import as_texts
from service.http.deps import MetricsDep, PrincipalDep, SessionDep, SettingsDep, SignerDep

router = APIRouter(prefix="/v1/assays", tags=["assays"])


@router.get(
    "/{assay_id}", response_model=AssayPublic, responses={k: ERROR_RESPONSES[k] for k in (404, 503)}
)
def get_assay(
    assay_id: uuid.UUID, session: SessionDep, metrics: MetricsDep, principal: PrincipalDep
) -> AssayPublic:
    """Per-fault progress, and containment signatures so far (final once the assay is done).
    A row stored before its text was made valid at its entry point still answers: the reply's
    strings are made text (`as_texts`), never a 500."""
    with metrics.gate_check_seconds.time():
        assay = assays.get(session, principal.tenant_id, assay_id)
        signatures = assays.signatures(session, assay)
        faults = [
            FaultPublic(
                id=p.fault_id,
                progress=Progress(
                    shard_count=p.shard_count,
                    shards_done=p.shards_done,
                    trials_planned=p.trials_planned,
                    trials_done=p.trials_done,
                ),
                final=assay.status in (AssayStatus.DONE, AssayStatus.STOPPED),
                signature=as_texts(signatures.get(p.fault_id)) if p.fault_id else None,
            )
            for p in assays.fault_progress(session, assay_id)
        ]
        return AssayPublic(
            id=assay.id,
            candidate_id=assay.candidate_id,
            status=AssayStatus(assay.status),
            catalogue=assay.catalogue,
            plan=assay.plan,
            progress=progress(assay, assays.live_progress(session, assay.id)),
            created_at=as_utc(assay.created_at),
            started_at=as_utc_or_none(assay.started_at),
            finished_at=as_utc_or_none(assay.finished_at),
            decision=assay.decision,
            reasons=reasons(as_texts(assay.reasons)),
            faults=faults,
            report=as_texts(assay.report),
            stop_reason=assay.stop_reason,
        )


@router.post(
    "/{assay_id}/abort",
    status_code=202,
    response_model=AbortPublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 409, 503)},
)
def abort_assay(
    assay_id: uuid.UUID,
    session: SessionDep,
    principal: PrincipalDep,
    signer: SignerDep,
    settings: SettingsDep,
    body: AbortCreate | None = None,
) -> AbortPublic:
    """Stop an assay and end it. No shard starts after the stop is recorded; shards that no live
    worker holds (queued, or whose worker went quiet) are stored at once as stopped, empty;
    running shards stop at their next batch; what was already recorded is kept. The assay is
    decided `block` as soon as no shard is running: in this request if none is. Repeating an
    abort changes nothing recorded, and settles any shard whose worker has gone since."""
    reason = body.reason if body else None
    command = assays.Abort(assay_id, settings.quota(), reason)
    assay = assays.abort(session, signer, principal, command)
    return AbortPublic(id=assay_id, status=AssayStatus(assay.status), stop_reason=assay.stop_reason)
