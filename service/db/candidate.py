"""Recording a submission: system, manifest, candidate, assay and its planned shards, at once."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.core.shards.assay import ShardSpec
from service.core.system.artifact import CODE, ArtifactSubject, Assurance, Source, written
from service.core.system.manifest import Manifest as CoreManifest
from service.core.system.text import check_system_name
from service.db.artifact import set_subjects
from service.db.assay import lease_until
from service.db.models import (
    Assay,
    AssayShard,
    Candidate,
    ComponentHash,
    Event,
    IdempotencyKey,
    ManifestRow,
    System,
    utcnow,
)

#: The lease a shard gets when it is recorded and sent (`Settings.shard_lease_s` by default).
DEFAULT_LEASE_S = 60.0


@dataclass(frozen=True)
class Recorded:
    candidate: Candidate
    assay: Assay
    system: System
    created_system: bool
    created_manifest: bool


def record_submission(
    session: Session,
    *,
    tenant_id: uuid.UUID,
    system_name: str,
    version: str,
    source_revision: str,
    manifest: CoreManifest,
    plan_document: dict[str, Any],
    catalogue: str,
    shards: Sequence[ShardSpec],
    submitter: str | None = None,
    submitted_by: str | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    code_sha256: str | None = None,
    policy: dict[str, Any] | None = None,
) -> Recorded:
    """Stage every row of one submission in `session`; the caller commits or rolls back.
    `code_sha256`: the tenant's code artifact the candidate names (checked by the caller)."""
    system, created_system = _stage_system(session, system_name, tenant_id)
    digest = manifest.digest()
    created_manifest = _stage_manifest(session, manifest, digest)
    candidate = Candidate(
        system_id=system.id,
        version=version,
        source_revision=source_revision,
        manifest_digest=digest,
        submitter=submitter,
        submitted_by=submitted_by,
        code_sha256=code_sha256,
    )
    # Without ORM relationships the unit of work does not order inserts by foreign key: flush
    # each parent before its children.
    session.add(candidate)
    session.flush()
    if code_sha256 is not None:
        # A subject from the start, `declared` until its assay's workers run it.
        declared = ArtifactSubject(CODE, code_sha256, Assurance.DECLARED, Source.ARTIFACT)
        set_subjects(session, candidate.id, [declared])
    assay = _stage_assay(session, candidate, plan_document, catalogue, shards, lease_s, policy)
    session.add(
        Event(
            kind="candidate.submitted",
            candidate_id=candidate.id,
            assay_id=assay.id,
            data={
                "system": system_name,
                "version": version,
                "source_revision": source_revision,
                "manifest_digest": digest,
                "shards": len(shards),
                **({"code": written(code_sha256)} if code_sha256 is not None else {}),
            },
        )
    )
    session.flush()
    return Recorded(candidate, assay, system, created_system, created_manifest)


def first_of_version(
    session: Session, tenant_id: uuid.UUID, system_name: str, version: str
) -> Candidate | None:
    """The first candidate recorded for a system's version. The system's row is locked until the
    transaction ends (PostgreSQL), so concurrent submissions of one system take turns and a
    second manifest under one version cannot slip in beside the first."""
    system = session.exec(
        select(System)
        .where(System.name == system_name, System.tenant_id == tenant_id)
        .with_for_update()
    ).first()
    if system is None:
        return None
    return session.exec(
        select(Candidate)
        .where(Candidate.system_id == system.id, Candidate.version == version)
        .order_by(col(Candidate.created_at), col(Candidate.id))
        .limit(1)
    ).first()


def _stage_system(session: Session, system_name: str, tenant_id: uuid.UUID) -> tuple[System, bool]:
    """The tenant's system of that name, created if new (and whether it was)."""
    system = session.exec(
        select(System).where(System.name == system_name, System.tenant_id == tenant_id)
    ).first()
    if system is not None:
        return system, False
    system = System(name=check_system_name(system_name), tenant_id=tenant_id)
    session.add(system)
    session.flush()
    return system, True


def _stage_manifest(session: Session, manifest: CoreManifest, digest: str) -> bool:
    """The manifest and its component hashes, stored once per digest; True if new."""
    if session.get(ManifestRow, digest) is not None:
        return False
    session.add(ManifestRow(digest=digest, document=manifest.model_dump(mode="json")))
    session.flush()
    for component, sha256 in manifest.component_hashes().items():
        session.add(ComponentHash(manifest_digest=digest, component=component, sha256=sha256))
    session.flush()
    return True


def _stage_assay(
    session: Session,
    candidate: Candidate,
    plan_document: dict[str, Any],
    catalogue: str,
    shards: Sequence[ShardSpec],
    lease_s: float,
    policy: dict[str, Any] | None,
) -> Assay:
    """An assay of `candidate` and one row per shard, flushed parent first. The caller sends one
    message per shard once this commits: each shard counts it, under a lease to be picked up in.
    `policy`: the organisation's policy it was planned under (`service.app.policies`).
    """
    assay = Assay(
        candidate_id=candidate.id,
        catalogue=catalogue,
        plan=plan_document,
        policy=policy,
        shard_count=len(shards),
        trials_planned=sum(s.stop - s.start for s in shards),
    )
    session.add(assay)
    session.flush()
    lease = lease_until(utcnow(), lease_s)
    session.add_all(
        AssayShard(
            assay_id=assay.id,
            shard_index=s.index,
            fault_id=s.fault_id,
            start=s.start,
            stop=s.stop,
            spec=s.to_dict(),
            dispatches=1,
            lease_expires_at=lease,
        )
        for s in shards
    )
    return assay


def record_rerun(
    session: Session,
    candidate: Candidate,
    *,
    plan_document: dict[str, Any],
    catalogue: str,
    shards: Sequence[ShardSpec],
    requested_by: str | None,
    person: str | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    policy: dict[str, Any] | None = None,
) -> Assay:
    """A new assay of an existing candidate: its evidence will be a new dossier version with its
    own trial counts (never merged with, or chosen over, the run before)."""
    assay = _stage_assay(session, candidate, plan_document, catalogue, shards, lease_s, policy)
    session.add(
        Event(
            kind="candidate.rerun",
            candidate_id=candidate.id,
            assay_id=assay.id,
            data={"requested_by": requested_by, "person": person, "shards": len(shards)},
        )
    )
    session.flush()
    return assay


def withdraw_rerun(session: Session, assay_id: uuid.UUID) -> None:
    """Delete a committed re-run that could not be enqueued."""
    session.execute(sa.delete(Event).where(col(Event.assay_id) == assay_id))
    session.execute(sa.delete(AssayShard).where(col(AssayShard.assay_id) == assay_id))
    session.execute(sa.delete(Assay).where(col(Assay.id) == assay_id))


def find_idempotency_key(session: Session, key: str) -> IdempotencyKey | None:
    return session.get(IdempotencyKey, key)


def withdraw_submission(session: Session, recorded: Recorded) -> None:
    """Delete a committed submission that could not be enqueued, so no half of it remains.

    Shared rows (the system, the manifest) go only if this submission created them and nothing
    else has come to use them since.
    """
    candidate_id, assay_id = recorded.candidate.id, recorded.assay.id
    session.execute(
        sa.delete(IdempotencyKey).where(col(IdempotencyKey.candidate_id) == candidate_id)
    )
    session.execute(sa.delete(Event).where(col(Event.candidate_id) == candidate_id))
    session.execute(sa.delete(AssayShard).where(col(AssayShard.assay_id) == assay_id))
    session.execute(sa.delete(Assay).where(col(Assay.id) == assay_id))
    session.execute(sa.delete(Candidate).where(col(Candidate.id) == candidate_id))
    digest = recorded.candidate.manifest_digest
    if recorded.created_manifest and not _used(session, Candidate.manifest_digest, digest):
        session.execute(
            sa.delete(ComponentHash).where(col(ComponentHash.manifest_digest) == digest)
        )
        session.execute(sa.delete(ManifestRow).where(col(ManifestRow.digest) == digest))
    if recorded.created_system and not _used(session, Candidate.system_id, recorded.system.id):
        session.execute(sa.delete(System).where(col(System.id) == recorded.system.id))


def _used(session: Session, column: Any, value: uuid.UUID | str) -> bool:
    return session.exec(select(Candidate.id).where(column == value).limit(1)).first() is not None
