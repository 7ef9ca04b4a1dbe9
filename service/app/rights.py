"""Whether a tenant's code still has the right to run an assay on a worker
(docs/operations.md, "When tenant code stops").

A worker keeps an assay's sandboxes warm between its shards only while the assay is open and not
stopping, the tenant's code is allowed, and every secret the sandboxes were loaded with is still
stored as it was (`Held.seals`: a digest of each ciphertext, taken before the values were
decrypted, so a rotation between the two reads ends the sandboxes rather than hiding). `lapsed`
says why the right ended, read afresh each time (worker.rights asks at each shard's start and on
a short poll).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from service.db import secret as stored
from service.db import tenant as tenants
from service.db.assay import OPEN
from service.db.models import Assay


@dataclass(frozen=True)
class Held:
    """What one assay's sandboxes hold on a worker: whose code, and which secrets as stored."""

    assay_id: uuid.UUID
    tenant_id: uuid.UUID
    tenant: str
    seals: Mapping[str, str]


def seals(engine: Engine, tenant_id: uuid.UUID, names: Sequence[str]) -> dict[str, str]:
    """A digest of each named secret's stored ciphertext (a name the tenant lacks is left out):
    what changes when the secret is put again, whatever its value."""
    with Session(engine) as session:
        rows = stored.ciphertexts(session, tenant_id, names)
    return {name: hashlib.sha256(data).hexdigest() for name, data in rows.items()}


@dataclass(frozen=True)
class RightEnded:
    """Why an assay's sandboxes end; `fails`: the assay fails saying so (its tenant's code was
    revoked or a secret it needs deleted: no shard of it may run again)."""

    reason: str
    fails: bool = False


def lapsed(engine: Engine, held: Held) -> RightEnded | None:
    """Why the sandboxes of `held` must end now, or None while their right to run holds."""
    with Session(engine) as session:
        row = session.exec(
            select(col(Assay.status), col(Assay.stop_reason)).where(col(Assay.id) == held.assay_id)
        ).first()
        if row is None or row[0] not in OPEN:
            return RightEnded(f"its assay ended ({row[0] if row else 'gone'})")
        if row[1] is not None:
            return RightEnded(f"its assay is stopping ({row[1]})")
        if not tenants.code_allowed(session, held.tenant_id):
            return RightEnded(
                f"tenant {held.tenant}'s code was revoked while its assay ran "
                f"(`assaygate tenants revoke-code {held.tenant}`)",
                fails=True,
            )
        return _resealed(session, held)


def resealed(engine: Engine, held: Held) -> RightEnded | None:
    """At a shard's start, which has just found its assay open and its tenant's code allowed:
    whether a secret the assay's warm sandboxes hold was deleted or rotated since."""
    with Session(engine) as session:
        return _resealed(session, held)


def _resealed(session: Session, held: Held) -> RightEnded | None:
    if not held.seals:
        return None
    now = stored.ciphertexts(session, held.tenant_id, list(held.seals))
    for name, seal in sorted(held.seals.items()):
        if name not in now:
            return RightEnded(f"secret {name}, which its sandbox held, was deleted", fails=True)
        if hashlib.sha256(now[name]).hexdigest() != seal:
            return RightEnded(f"secret {name}, which its sandbox held, was rotated")
    return None
