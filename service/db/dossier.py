"""Signed dossier versions, holds and change triggers, in the database: tables, queries and the
writes that store a version (the rules that decide what a version says live in
`service.app.dossiers`, `service.app.changes` and `service.app.reviews`).

A dossier version is a row that is only ever added (the database refuses UPDATE on it). Each
change to a candidate's evidence or standing writes the next version, chained to the last by the
SHA-256 of its payload. Versions of one candidate are serialised by a row lock on the candidate
(`lock`), so version numbers never collide.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import aliased, defer
from sqlmodel import Session, col, select

from service.core.decision.gate import Decision
from service.core.signing.dossier import (
    DEFAULT_TRIGGERS,
    CandidateRef,
    Signer,
    payload_digest,
    seal,
    statement,
)
from service.core.system.manifest import CODE
from service.core.system.text import check_system_name
from service.db.models import (
    Candidate,
    ComponentHash,
    ConfigChange,
    Dossier,
    Event,
    Hold,
    HoldStatus,
    System,
)

# A dossier version says an assay decision (`Decision`) or, signed by a reported change,
# "reopened": the gate must assay the system again.
REOPENED = "reopened"
# A hold is open on any dossier that does not allow; these are the decisions it may be about.
REVIEWABLE = (Decision.HOLD, Decision.BLOCK)


def iso(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def system_triggers(system: System) -> tuple[str, ...]:
    return tuple(sorted(system.triggers)) if system.triggers is not None else DEFAULT_TRIGGERS


# --------------------------------------------------------------------------------- reading


def latest(session: Session, candidate_id: uuid.UUID) -> Dossier | None:
    return session.exec(
        select(Dossier)
        .where(Dossier.candidate_id == candidate_id)
        .order_by(col(Dossier.version).desc())
        .limit(1)
    ).first()


def latest_of(session: Session, candidate_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Dossier]:
    """Each candidate's newest dossier version, in one query, without the signed bytes."""
    if not candidate_ids:
        return {}
    newest = (
        sa.select(col(Dossier.candidate_id), sa.func.max(col(Dossier.version)))
        .where(col(Dossier.candidate_id).in_(sorted(set(candidate_ids))))
        .group_by(col(Dossier.candidate_id))
    )
    rows = session.exec(
        select(Dossier)
        .where(sa.tuple_(col(Dossier.candidate_id), col(Dossier.version)).in_(newest))
        .options(defer(cast(Any, Dossier.payload)), defer(cast(Any, Dossier.envelope)))
    ).all()
    return {d.candidate_id: d for d in rows}


def reviews_of(session: Session, candidate_ids: Sequence[uuid.UUID]) -> list[Hold]:
    """The holds of these candidates that are open, waived or rejected (not superseded), oldest
    first."""
    if not candidate_ids:
        return []
    return list(
        session.exec(
            select(Hold)
            .where(
                col(Hold.candidate_id).in_(sorted(set(candidate_ids))),
                col(Hold.status) != HoldStatus.SUPERSEDED.value,
            )
            .order_by(col(Hold.created_at), col(Hold.id))
        ).all()
    )


def versions(session: Session, candidate_id: uuid.UUID) -> Sequence[Dossier]:
    return session.exec(
        select(Dossier).where(Dossier.candidate_id == candidate_id).order_by(col(Dossier.version))
    ).all()


def _latest_per_candidate(system_id: uuid.UUID) -> Any:
    newest = (
        sa.select(col(Dossier.candidate_id), sa.func.max(col(Dossier.version)).label("version"))
        .where(col(Dossier.system_id) == system_id)
        .group_by(col(Dossier.candidate_id))
        .subquery()
    )
    return select(Dossier).join(
        newest,
        sa.and_(
            col(Dossier.candidate_id) == newest.c.candidate_id,
            col(Dossier.version) == newest.c.version,
        ),
    )


def last_allowed(
    session: Session, system_id: uuid.UUID, *, excluding: uuid.UUID | None = None
) -> Dossier | None:
    """The newest dossier of the system that still allows (the latest version of its candidate);
    `excluding` a candidate, the last allowed dossier of any other (what it is compared with)."""
    query = _latest_per_candidate(system_id).where(Dossier.decision == Decision.ALLOW)
    if excluding is not None:
        query = query.where(col(Dossier.candidate_id) != excluding)
    found: Dossier | None = session.exec(
        query.order_by(col(Dossier.created_at).desc(), col(Dossier.version).desc()).limit(1)
    ).first()
    return found


def last_allowed_per_system(
    session: Session, system_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Dossier]:
    """Each system's newest dossier that still allows (the latest version of its candidate), in
    two small queries whatever the number of candidates (without the signed bytes)."""
    if not system_ids:
        return {}
    newer = aliased(Dossier)
    still_allows = (
        sa.select(col(Dossier.system_id), col(Dossier.id))
        .where(
            col(Dossier.system_id).in_(sorted(set(system_ids))),
            col(Dossier.decision) == Decision.ALLOW,
            ~sa.exists().where(
                col(newer.candidate_id) == col(Dossier.candidate_id),
                col(newer.version) > col(Dossier.version),
            ),
        )
        .order_by(col(Dossier.created_at).desc(), col(Dossier.version).desc())
    )
    chosen: dict[uuid.UUID, uuid.UUID] = {}
    for system_id, dossier_id in session.execute(still_allows).all():
        chosen.setdefault(system_id, dossier_id)
    if not chosen:
        return {}
    rows = session.exec(
        select(Dossier)
        .where(col(Dossier.id).in_(sorted(chosen.values())))
        .options(defer(cast(Any, Dossier.payload)), defer(cast(Any, Dossier.envelope)))
    ).all()
    return {d.system_id: d for d in rows}


def standing(session: Session, system_id: uuid.UUID) -> Sequence[Dossier]:
    """The latest version of each candidate of the system that allows or holds, oldest first:
    the dossiers a production change can reopen."""
    found: Sequence[Dossier] = session.exec(
        _latest_per_candidate(system_id)
        .where(col(Dossier.decision).in_([Decision.ALLOW, Decision.HOLD]))
        .order_by(col(Dossier.created_at))
    ).all()
    return found


def allowed_view(session: Session, dossier: Dossier | None) -> dict[str, Any] | None:
    """What `compare_triggers` compares with: the allowed dossier's digest, candidate, hashes."""
    if dossier is None:
        return None
    candidate = session.get(Candidate, dossier.candidate_id)
    return {
        "digest": dossier.digest,
        "candidate_id": str(dossier.candidate_id),
        "version": candidate.version if candidate else None,
        "hashes": dossier.triggers,
        "catalogue_version": dossier.catalogue_version,
    }


def predicate_of(dossier: Dossier) -> dict[str, Any]:
    stmt: dict[str, Any] = json.loads(dossier.payload)
    predicate: dict[str, Any] = stmt["predicate"]
    return predicate


def open_holds(session: Session, candidate_id: uuid.UUID) -> Sequence[Hold]:
    return session.exec(
        select(Hold)
        .where(Hold.candidate_id == candidate_id, Hold.status == HoldStatus.OPEN.value)
        .order_by(col(Hold.created_at))
    ).all()


def holds(
    session: Session,
    *,
    system: str | None = None,
    status: str | None = None,
    limit: int = 100,
    tenant_id: uuid.UUID | None = None,
) -> Sequence[Hold]:
    query = (
        select(Hold)
        .join(Candidate, col(Candidate.id) == col(Hold.candidate_id))
        .join(System, col(System.id) == col(Candidate.system_id))
    )
    if tenant_id is not None:
        query = query.where(System.tenant_id == tenant_id)
    if system is not None:
        query = query.where(System.name == system)
    if status is not None:
        query = query.where(Hold.status == status)
    return session.exec(query.order_by(col(Hold.created_at).desc()).limit(limit)).all()


def candidate_names(
    session: Session, candidate_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, tuple[str, str]]:
    """Each candidate's system name and version."""
    if not candidate_ids:
        return {}
    rows = session.exec(
        select(Candidate.id, System.name, Candidate.version)
        .join(System, col(System.id) == col(Candidate.system_id))
        .where(col(Candidate.id).in_(list(set(candidate_ids))))
    ).all()
    return {cid: (name, version) for cid, name, version in rows}


def hold_of_tenant(session: Session, hold_id: uuid.UUID, tenant_id: uuid.UUID) -> Hold | None:
    return session.exec(
        select(Hold)
        .join(Candidate, col(Candidate.id) == col(Hold.candidate_id))
        .join(System, col(System.id) == col(Candidate.system_id))
        .where(Hold.id == hold_id, System.tenant_id == tenant_id)
    ).first()


def dossier_of_tenant(
    session: Session, dossier_id: uuid.UUID, tenant_id: uuid.UUID
) -> Dossier | None:
    return session.exec(
        select(Dossier)
        .join(System, col(System.id) == col(Dossier.system_id))
        .where(Dossier.id == dossier_id, System.tenant_id == tenant_id)
    ).first()


def hold_view(hold: Hold) -> dict[str, Any]:
    return {
        "id": str(hold.id),
        "status": hold.status,
        "reasons": hold.reasons,
        "opened_at": iso(hold.created_at),
    }


# --------------------------------------------------------------------------------- writing


def lock(session: Session, candidate_id: uuid.UUID) -> Candidate:
    """Serialise the versions of one candidate (SQLite serialises every writer anyway)."""
    return session.exec(
        select(Candidate).where(Candidate.id == candidate_id).with_for_update()
    ).one()


def lock_system(session: Session, system_id: uuid.UUID) -> System:
    """Serialise a finishing assay with a reported configuration change of its system, so the
    one always sees the other (taken before any candidate lock: one order, no deadlock). `FOR NO
    KEY UPDATE`: submissions, whose new rows only reference the system, are not held up."""
    return session.exec(
        select(System).where(System.id == system_id).with_for_update(key_share=True)
    ).one()


def store(
    session: Session,
    signer: Signer,
    *,
    dossier_id: uuid.UUID,
    candidate: Candidate,
    manifest_digest: str,
    predicate: dict[str, Any],
    assay_id: uuid.UUID | None,
) -> Dossier:
    stmt = statement(
        CandidateRef(str(candidate.id), "", "").subject_name(), manifest_digest, predicate
    )
    payload, envelope = seal(stmt, signer)
    triggers = predicate["change_triggers"]
    dossier = Dossier(
        id=dossier_id,
        candidate_id=candidate.id,
        system_id=candidate.system_id,
        assay_id=assay_id,
        version=int(predicate["dossier_version"]),
        payload=payload,
        envelope=json.dumps(envelope, separators=(",", ":")),
        digest=payload_digest(payload),
        previous=predicate["previous"],
        decision=str(predicate["decision"]),
        reasons=list(predicate["reasons"]),
        change=str(predicate["change"])[:500],
        triggers=dict(triggers["hashes"]),
        catalogue_version=str(predicate["catalogue_version"]),
        keyid=signer.keyid,
    )
    session.add(dossier)
    session.flush()
    session.add(
        Event(
            kind="dossier.issued",
            candidate_id=candidate.id,
            assay_id=assay_id,
            data={
                "dossier_id": str(dossier.id),
                "version": dossier.version,
                "digest": dossier.digest,
                "decision": dossier.decision,
                "change": dossier.change,
                "keyid": dossier.keyid,
            },
        )
    )
    return dossier


def supersede_reviews(session: Session, candidate_id: uuid.UUID) -> None:
    """New evidence (or a reopened gate) ends every review of the evidence before it."""
    session.execute(
        sa.update(Hold)
        .where(
            col(Hold.candidate_id) == candidate_id,
            col(Hold.status) != HoldStatus.SUPERSEDED.value,
        )
        .values(status=HoldStatus.SUPERSEDED.value)
    )


# -------------------------------------------------------------------------- change triggers


def set_triggers(
    session: Session, system_name: str, components: Sequence[str], *, tenant_id: uuid.UUID
) -> System:
    system = session.exec(
        select(System).where(System.name == system_name, System.tenant_id == tenant_id)
    ).first()
    if system is None:
        system = System(name=check_system_name(system_name), tenant_id=tenant_id)
    system.triggers = sorted(set(components))
    session.add(system)
    session.add(
        Event(
            kind="system.triggers_set",
            tenant_id=tenant_id,
            data={"system": system_name, "triggers": system.triggers},
        )
    )
    session.flush()
    return system


def record_config_change(
    session: Session,
    system: System,
    *,
    component: str,
    sha256: str,
    trigger: bool,
    reported_by: str | None,
    note: str | None,
    now: datetime,
    reopened: Sequence[Dossier],
) -> ConfigChange:
    """The reported change and its event, naming the versions it reopened."""
    change = ConfigChange(
        system_id=system.id,
        component=component,
        sha256=sha256,
        trigger=trigger,
        reported_by=reported_by,
        note=note,
        created_at=now,
        reopened=len(reopened),
    )
    session.add(change)
    session.add(
        Event(
            kind="system.config_changed",
            tenant_id=system.tenant_id,
            data={
                "system": system.name,
                "component": component,
                "sha256": sha256,
                "trigger": trigger,
                "reopened": [str(d.id) for d in reopened],
            },
        )
    )
    session.flush()
    return change


@dataclass(frozen=True)
class OpenChange:
    """A reported production change of a trigger component that no passing candidate carries
    yet: it keeps the gate reopened for every candidate whose manifest has another hash."""

    component: str
    sha256: str
    reported_at: datetime
    reported_by: str | None


def open_config_changes(
    session: Session, system_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[OpenChange]]:
    """Per system, the newest reported change of each trigger component, for as long as no
    candidate whose manifest carries the reported hash has passed (has an allowing dossier
    version): until then the live configuration is one nobody assayed. A candidate with another
    configuration never closes it, whatever its own assay decides."""
    if not system_ids:
        return {}
    rows = session.exec(
        select(ConfigChange)
        .where(col(ConfigChange.system_id).in_(sorted(set(system_ids))), col(ConfigChange.trigger))
        .order_by(col(ConfigChange.created_at), col(ConfigChange.id))
    ).all()
    newest: dict[tuple[uuid.UUID, str], ConfigChange] = {}
    for row in rows:
        newest[(row.system_id, row.component)] = row
    found: dict[uuid.UUID, list[OpenChange]] = {}
    for (system_id, component), change in sorted(newest.items(), key=lambda kv: kv[0][1]):
        allowing = (
            select(Dossier.id)
            .join(Candidate, col(Candidate.id) == col(Dossier.candidate_id))
            .where(col(Dossier.system_id) == system_id, col(Dossier.decision) == Decision.ALLOW)
        )
        if component == CODE:
            # The deployed code: closed by an allowed candidate that ships that artifact.
            carrying = allowing.where(col(Candidate.code_sha256) == change.sha256)
        else:
            carrying = allowing.join(
                ComponentHash,
                sa.and_(
                    col(ComponentHash.manifest_digest) == col(Candidate.manifest_digest),
                    col(ComponentHash.component) == component,
                ),
            ).where(col(ComponentHash.sha256) == change.sha256)
        passed = session.exec(carrying.limit(1)).first()
        if passed is None:
            found.setdefault(system_id, []).append(
                OpenChange(component, change.sha256, change.created_at, change.reported_by)
            )
    return found


# ------------------------------------------------------------------------------------- gate


def gate_candidate(session: Session, system: System, version: str | None) -> Candidate | None:
    query = select(Candidate).where(Candidate.system_id == system.id)
    if version is not None:
        query = query.where(Candidate.version == version)
    return session.exec(
        query.order_by(col(Candidate.created_at).desc(), col(Candidate.id).desc()).limit(1)
    ).first()
