"""people named without a part of their key's secret

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06 09:00:00

Revision 0007 named the person of each key that existed before people did "<name or 'key'>
<prefix>", and `prefix` is the first characters of the key's secret: those names reached the
dashboard, the audit log and signed dossiers. Such a person is renamed "<name or 'key'> <the first
8 characters of the key's id>" (the id is not secret), and the names copied into candidates
(`submitted_by`) and holds (`reviewed_by`) follow. Dossier versions already signed keep their
bytes; versions signed from now on name the person alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_api_key = sa.table(
    "api_key",
    sa.column("id", sa.Uuid()),
    sa.column("prefix", sa.String()),
    sa.column("person_id", sa.Uuid()),
)
_person = sa.table(
    "person", sa.column("id", sa.Uuid()), sa.column("tenant_id", sa.Uuid()), sa.column("name")
)
_candidate = sa.table(
    "candidate", sa.column("submitter", sa.String()), sa.column("submitted_by", sa.String())
)
_hold = sa.table("hold", sa.column("reviewer", sa.String()), sa.column("reviewed_by", sa.String()))


def _renames(forward: bool) -> list[tuple[str, str, str, object]]:
    """(key id, old name, new name, person id) for every person whose name carries its key's
    prefix (forward) or, going back, the id that replaced it."""
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(_api_key.c.id, _api_key.c.prefix, _person.c.id, _person.c.name).join(
            _person, _person.c.id == _api_key.c.person_id
        )
    ).all()
    found = []
    for key_id, prefix, person_id, name in rows:
        short = str(key_id)[:8]
        if not prefix:
            continue
        old, new = (prefix, short) if forward else (short, prefix)
        if name.endswith(f" {old}"):
            found.append((str(key_id), name, name[: -len(old)] + new, person_id))
    return found


def _apply(forward: bool) -> None:
    for key_id, old, new, person_id in _renames(forward):
        op.execute(_person.update().where(_person.c.id == person_id).values(name=new[:200]))
        op.execute(
            _candidate.update()
            .where(_candidate.c.submitter == key_id, _candidate.c.submitted_by == old)
            .values(submitted_by=new[:200])
        )
        op.execute(
            _hold.update()
            .where(_hold.c.reviewer == key_id, _hold.c.reviewed_by == old)
            .values(reviewed_by=new[:200])
        )


def upgrade() -> None:
    _apply(forward=True)


def downgrade() -> None:
    _apply(forward=False)
