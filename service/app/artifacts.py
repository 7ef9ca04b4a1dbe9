"""Code artifacts: what a candidate ships, stored by the SHA-256 the service computes
(docs/operations.md, "How code reaches the workers"; docs/dossier.md, "Subjects").

A tenant uploads its packed code (`POST /v1/artifacts`, `assaygate submit --code`); the service
hashes the bytes it received and stores them once per tenant and digest, so the same bytes give
the same digest and one row, and no name a client sends can point a digest at other bytes. A
candidate names its code by that digest (`code: sha256:…`), and only a digest its own tenant
stored. A tenant worker fetches the bytes by digest and hashes them again before anything runs
(`worker.code`). A candidate's dossier names the artifacts as subjects with their assurance:
`declared` when it is submitted, `executed` once its assay's workers ran it (`subjects_after`).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.app.errors import Conflict, DigestMismatch, FieldInvalid, NotFound
from service.core.errors import ArtifactInvalid, AssaygateError
from service.core.evidence.builds import EndpointBuilds, endpoint_builds, from_assay_view
from service.core.system.artifact import (
    CODE,
    TENANT_IMAGE,
    ArtifactSubject,
    Assurance,
    Source,
    image_digest,
    parse_digest,
    written,
)
from service.core.system.manifest import build_endpoints, parse_manifest
from service.db import artifact as artifacts
from service.db.apikey import Principal, audit
from service.db.session import session_scope
from service.packing import UnpackLimits, check_archive

log = logging.getLogger("assaygate.api")


@dataclass(frozen=True)
class Uploaded:
    """An artifact as the tenant stored it; `created`: this upload wrote it (else the same
    bytes were already there)."""

    digest: str
    size: int
    created: bool


def upload(
    session: Session,
    principal: Principal,
    data: bytes,
    claimed: str | None = None,
    limits: UnpackLimits | None = None,
) -> Uploaded:
    """Store the bytes under the SHA-256 computed here. `claimed` (`sha256:…`, optional): the
    digest the client computed; bytes that hash to anything else are refused, naming it. The
    bytes must be an archive a worker would unpack within `limits` (the workers' settings):
    anything else is refused here, naming the entry and the rule, and nothing is stored."""
    sha256 = hashlib.sha256(data).hexdigest()
    if claimed is not None:
        try:
            wanted = parse_digest(claimed, "digest")
        except ArtifactInvalid as exc:
            raise FieldInvalid(exc.message, field="digest") from None
        if wanted != sha256:
            raise DigestMismatch(
                f"the bytes received hash to {written(sha256)}, not to the {claimed} claimed: a "
                "digest is computed from the bytes, never taken from a name",
                field="digest",
            )
    try:
        check_archive(data, limits or UnpackLimits())
    except ArtifactInvalid as exc:
        raise FieldInvalid(
            f"the uploaded bytes are not an artifact a worker would unpack: {exc.message}",
            field="body",
        ) from None
    found = artifacts.find(session, principal.tenant_id, sha256)
    if found is not None:
        return Uploaded(written(sha256), found.size, False)
    try:
        artifacts.stage(session, principal.tenant_id, sha256, data)
        audit(session, principal, "artifact.upload", written(sha256), size=len(data))
        session.commit()
    except sa.exc.IntegrityError:
        # The same bytes, uploaded at the same moment: theirs is the row.
        session.rollback()
    stored = artifacts.find(session, principal.tenant_id, sha256)
    if stored is None:
        raise Conflict(f"{written(sha256)} could not be stored; try again", field="body")
    log.info("artifact stored", extra={"path": written(sha256)})
    return Uploaded(written(sha256), stored.size, True)


def store(
    engine: Engine,
    principal: Principal,
    data: bytes,
    claimed: str | None,
    limits: UnpackLimits | None = None,
) -> Uploaded:
    """`upload` in a transaction of its own (the streamed route has no request session)."""
    with Session(engine) as session:
        return upload(session, principal, data, claimed, limits)


def download(session: Session, principal: Principal, digest: str) -> bytes:
    """The tenant's artifact, exactly as stored; NotFound for another tenant's or none."""
    sha256 = _digest(digest, "digest")
    data = artifacts.content(session, principal.tenant_id, sha256)
    if data is None:
        raise NotFound(f"tenant {principal.tenant} has no artifact {digest}", field="digest")
    return data


def _digest(text: str, field: str) -> str:
    try:
        return parse_digest(text, field)
    except ArtifactInvalid as exc:
        raise FieldInvalid(exc.message, field=field) from None


def asked(artifact: str | None) -> str | None:
    """The hex digest a gate read asks by (`?artifact=`), or None; refused naming `artifact`."""
    return _digest(artifact, "artifact") if artifact is not None else None


def check_named(
    session: Session, tenant_id: uuid.UUID, tenant: str, code: str | None
) -> str | None:
    """The hex SHA-256 of the code artifact a submission names, which its own tenant must have
    stored (None: it names none)."""
    if code is None:
        return None
    sha256 = _digest(code, "code")
    if artifacts.find(session, tenant_id, sha256) is None:
        raise FieldInvalid(
            f"tenant {tenant} has no artifact {code}: upload the code first (`POST "
            "/v1/artifacts`, or `assaygate submit --code PATH`), then name the digest the "
            "upload answered",
            field="code",
        )
    return sha256


def fetch(engine: Engine, tenant_id: uuid.UUID, sha256: str) -> bytes | None:
    """A worker's read of the tenant's artifact, exactly as stored (it hashes them itself)."""
    with session_scope(engine) as session:
        return artifacts.content(session, tenant_id, sha256)


def subjects_after(
    session: Session, candidate_id: uuid.UUID, code: str | None, assay_id: uuid.UUID
) -> list[ArtifactSubject]:
    """The artifact subjects of a finished assay's dossier, recorded for the gate's asking by
    digest: what its shards ran is `executed` (the candidate's artifact, or an operator's
    folder); the candidate's artifact, if no shard ran it, stays `declared`."""
    ran = artifacts.ran(session, assay_id)
    found: list[ArtifactSubject] = []
    for sha256 in ran:
        source = Source.ARTIFACT if sha256 == code else Source.OPERATOR_DIR
        name = CODE if source is Source.ARTIFACT else f"{CODE}/operator"
        found.append(ArtifactSubject(name, sha256, Assurance.EXECUTED, source))
    if code is not None and code not in ran:
        found.append(ArtifactSubject(CODE, code, Assurance.DECLARED, Source.ARTIFACT))
    artifacts.set_subjects(session, candidate_id, found)
    return found


def subjects_of(session: Session, candidate_id: uuid.UUID) -> Sequence[ArtifactSubject]:
    return artifacts.subjects(session, candidate_id)


def images_after(session: Session, assay_id: uuid.UUID) -> list[ArtifactSubject]:
    """The tenant images a finished assay's code ran in, as its dossier names them: `declared`,
    for the worker said so and nothing checks the image. A subject of the dossier only (not
    of the gate's index of what a candidate ships: many candidates run in one image)."""
    return [
        ArtifactSubject(TENANT_IMAGE, image_digest(ref), Assurance.DECLARED, ref=ref)
        for ref in artifacts.images(session, assay_id)
    ]


@dataclass(frozen=True)
class Shipping:
    """What a candidate ships, as its page shows it: its code with the assurance the gate has
    for it (`executed` once a shard ran it), the remote builds declared and reported per
    endpoint (`EndpointBuilds.mismatch` says what holds), and the tenant images its code ran
    in (the workers' word)."""

    code: tuple[ArtifactSubject, ...]
    builds: tuple[EndpointBuilds, ...]
    images: tuple[str, ...]


def shipping(
    session: Session,
    candidate_id: uuid.UUID,
    assay_id: uuid.UUID,
    report: Mapping[str, Any] | None,
    manifest: Mapping[str, Any],
) -> Shipping:
    """The candidate's code subjects as recorded; the builds its assay's report counted, or,
    before there is one, those its manifest declares."""
    if report is not None:
        builds = from_assay_view(report.get("builds") or {})
    else:
        try:
            declared = build_endpoints(parse_manifest(dict(manifest)))
        except AssaygateError:
            declared = {}  # a manifest stored before a rule it now breaks: nothing declared
        builds = endpoint_builds(declared)
    return Shipping(
        tuple(artifacts.subjects(session, candidate_id)),
        builds,
        tuple(artifacts.images(session, assay_id)),
    )


def system_shipping(engine: Engine, principal: Principal, artifact: str) -> str:
    """The system whose newest candidate ships `artifact`, for a gate read that names only the
    artifact (`GET /v1/gate?artifact=`); not found, a 404 naming `artifact`."""
    sha256 = asked(artifact)
    assert sha256 is not None
    with session_scope(engine) as session:
        found = artifacts.system_shipping(session, principal.tenant_id, sha256)
        if found is None:
            raise NotFound(
                f"no candidate of tenant {principal.tenant} ships {artifact}: it is not a "
                "subject of any of its dossiers, nor the code any of its candidates names",
                field="artifact",
            )
        return found.name
