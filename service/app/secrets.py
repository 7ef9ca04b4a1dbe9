"""A tenant's named secrets (model keys for its agents): a tenant admin puts, lists and deletes
them; a submission checks that the secrets its manifest names exist; the tenant's worker decrypts
them for its sandboxed code (`secrets_for`).

A value is encrypted before anything is written (`service.core.system.secret`), and never returned,
logged, audited (the audit event holds the name), quoted in an error or signed into a dossier (a
manifest holds names only).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from sqlmodel import Session

from service.app.errors import FieldInvalid, NotFound, SecretMissing
from service.core.system.secret import HiddenEnv, SecretsKey, check_name, check_value, unique_names
from service.db import secret as stored
from service.db.apikey import Principal, audit
from service.db.secret import SecretName

__all__ = ["SecretName", "check_named", "delete", "of_tenant", "put", "secrets_for"]


def _missing(name: str) -> str:
    return f"no secret named {name}; a tenant admin stores it with PUT /v1/secrets/{name}"


def put(
    session: Session,
    principal: Principal,
    key: SecretsKey,
    name: str,
    value: str,
    systems: Sequence[str] | None = None,
) -> SecretName:
    """Create or replace the tenant's secret `name`, limited to `systems` (None: every system
    of the tenant). Audited with the name, never the value."""
    check_name(name, "name")
    secret = check_value(value, "value")
    if systems is not None:
        systems = sorted(set(systems))
        if not systems:
            raise FieldInvalid("name at least one system, or leave systems out", field="systems")
    ciphertext = key.encrypt(principal.tenant_id, name, secret)
    for attempt in range(2):
        try:
            replaced = stored.get(session, principal.tenant_id, name) is not None
            written = stored.put(session, principal.tenant_id, name, ciphertext, systems)
            audit(
                session, principal, "secret.put", f"secret:{name}", replaced=replaced,
                systems=systems,
            )  # fmt: skip
            session.commit()
            return written
        except sa.exc.IntegrityError:
            # Another request created the same name first: replace it instead.
            session.rollback()
            if attempt:
                raise
    raise AssertionError("unreachable")


def delete(session: Session, principal: Principal, name: str) -> None:
    """Delete the tenant's secret `name`; NotFound naming `name` if it has none."""
    check_name(name, "name")
    if not stored.delete(session, principal.tenant_id, name):
        raise NotFound(f"no secret named {name}", field="name")
    audit(session, principal, "secret.delete", f"secret:{name}")
    session.commit()


def of_tenant(session: Session, principal: Principal) -> Sequence[SecretName]:
    """The tenant's secrets by name, with when each was written; never a value."""
    return stored.names(session, principal.tenant_id)


def check_named(
    session: Session,
    tenant_id: uuid.UUID,
    names: Sequence[str],
    field: str,
    system: str | None = None,
) -> None:
    """Refuse (FieldInvalid naming `<field>.<i>`) the first name the tenant has no secret of, or
    whose secret is limited to systems other than `system` (the manifest's)."""
    have = stored.existing(session, tenant_id, names)
    for i, name in enumerate(names):
        if name not in have:
            raise FieldInvalid(_missing(name), field=f"{field}.{i}")
        systems = have[name]
        if systems is not None and system not in systems:
            raise FieldInvalid(
                f"secret {name} is limited to the systems {', '.join(systems)}; not {system}",
                field=f"{field}.{i}",
            )


def secrets_for(
    session: Session, tenant_id: uuid.UUID, names: Sequence[str], key: SecretsKey
) -> dict[str, str]:
    """The named secrets of the tenant, decrypted, for its sandboxed code's environment
    (`service.sandbox.Confinement.env`). The mapping's repr hides every value. Raises
    SecretMissing naming the first secret the tenant has not stored, and
    `service.core.errors.SecretUnreadable` for one that does not decrypt under `key`."""
    wanted = unique_names(names)
    rows = stored.ciphertexts(session, tenant_id, wanted)
    out = HiddenEnv()
    for name in wanted:
        if name not in rows:
            raise SecretMissing(_missing(name), field=name)
        out[name] = key.decrypt(tenant_id, name, rows[name]).reveal()
    return out
