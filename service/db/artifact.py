"""Code artifacts: a tenant's stored bytes by digest, the subjects a candidate ships, and the
code each shard ran. Queries only; the rules live in `service.app.artifacts`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.core.system.artifact import ArtifactSubject, Assurance, Source
from service.db.models import (
    ArtifactRow,
    AssayShard,
    Candidate,
    CandidateArtifact,
    System,
)


@dataclass(frozen=True)
class StoredArtifact:
    """An artifact's row without its bytes."""

    sha256: str
    size: int


def find(session: Session, tenant_id: uuid.UUID, sha256: str) -> StoredArtifact | None:
    """The tenant's artifact of that digest (never another tenant's), without its bytes."""
    row = session.execute(
        sa.select(col(ArtifactRow.sha256), col(ArtifactRow.size)).where(
            col(ArtifactRow.tenant_id) == tenant_id, col(ArtifactRow.sha256) == sha256
        )
    ).first()
    if row is None:
        return None
    return StoredArtifact(row[0], row[1])


def content(session: Session, tenant_id: uuid.UUID, sha256: str) -> bytes | None:
    """The bytes stored under the tenant's digest, exactly as stored (the caller hashes them)."""
    data = session.execute(
        sa.select(col(ArtifactRow.content)).where(
            col(ArtifactRow.tenant_id) == tenant_id, col(ArtifactRow.sha256) == sha256
        )
    ).scalar()
    return bytes(data) if data is not None else None


def stage(session: Session, tenant_id: uuid.UUID, sha256: str, data: bytes) -> None:
    """A new artifact row; the caller commits (a concurrent upload of the same bytes loses the
    race on the primary key and finds the winner's row)."""
    session.add(ArtifactRow(tenant_id=tenant_id, sha256=sha256, size=len(data), content=data))
    session.flush()


def set_subjects(
    session: Session, candidate_id: uuid.UUID, subjects: Sequence[ArtifactSubject]
) -> None:
    """The candidate's artifact subjects, replacing those recorded before (a re-run's evidence
    replaces the earlier assay's)."""
    session.execute(
        sa.delete(CandidateArtifact).where(col(CandidateArtifact.candidate_id) == candidate_id)
    )
    for s in subjects:
        session.add(
            CandidateArtifact(
                candidate_id=candidate_id,
                sha256=s.sha256,
                name=s.name,
                assurance=s.assurance.value,
                source=s.source.value if s.source is not None else None,
            )
        )
    session.flush()


def subjects(session: Session, candidate_id: uuid.UUID) -> list[ArtifactSubject]:
    rows = session.exec(
        select(CandidateArtifact)
        .where(CandidateArtifact.candidate_id == candidate_id)
        .order_by(col(CandidateArtifact.name), col(CandidateArtifact.sha256))
    ).all()
    return [
        ArtifactSubject(
            r.name, r.sha256, Assurance(r.assurance), Source(r.source) if r.source else None
        )
        for r in rows
    ]


def ran(session: Session, assay_id: uuid.UUID) -> list[str]:
    """The distinct code digests the assay's shards recorded (what its workers ran)."""
    found = session.execute(
        sa.select(col(AssayShard.code_sha256))
        .where(col(AssayShard.assay_id) == assay_id, col(AssayShard.code_sha256).is_not(None))
        .distinct()
    ).scalars()
    return sorted(str(x) for x in found)


def images(session: Session, assay_id: uuid.UUID) -> list[str]:
    """The distinct tenant images the assay's shards recorded their code ran in."""
    found = session.execute(
        sa.select(col(AssayShard.tenant_image))
        .where(col(AssayShard.assay_id) == assay_id, col(AssayShard.tenant_image).is_not(None))
        .distinct()
    ).scalars()
    return sorted(str(x) for x in found)


def candidate_shipping(
    session: Session, system: System, sha256: str, version: str | None = None
) -> Candidate | None:
    """The system's newest candidate (of `version`, if given) that has this artifact as a
    subject."""
    query = (
        select(Candidate)
        .join(CandidateArtifact, col(CandidateArtifact.candidate_id) == col(Candidate.id))
        .where(Candidate.system_id == system.id, CandidateArtifact.sha256 == sha256)
    )
    if version is not None:
        query = query.where(Candidate.version == version)
    return session.exec(
        query.order_by(col(Candidate.created_at).desc(), col(Candidate.id).desc()).limit(1)
    ).first()


def system_shipping(session: Session, tenant_id: uuid.UUID, sha256: str) -> System | None:
    """The system of the tenant's newest candidate that has this artifact as a subject."""
    return session.exec(
        select(System)
        .join(Candidate, col(Candidate.system_id) == col(System.id))
        .join(CandidateArtifact, col(CandidateArtifact.candidate_id) == col(Candidate.id))
        .where(System.tenant_id == tenant_id, CandidateArtifact.sha256 == sha256)
        .order_by(col(Candidate.created_at).desc(), col(Candidate.id).desc())
        .limit(1)
    ).first()
