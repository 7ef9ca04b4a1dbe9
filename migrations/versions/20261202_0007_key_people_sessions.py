"""people behind API keys; server-side dashboard sessions; submitter and reviewer names

Revision ID: 0007
Revises: 0005
Create Date: 2026-12-02 09:00:00

Every API key now belongs to a person (or service account) of its tenant. A key that exists
before this revision gets a person of its own, named after the key ("<name or 'key'> <prefix>"),
so no two existing keys are taken for the same person. Candidates and holds keep the name of the
person behind the submitting and the reviewing key (backfilled from those keys). Dashboard
sessions are kept on the server (`browser_session`), so signing out and revoking a key end them.

The lead relinks `down_revision` to "0006" when the parallel revision 0006 is merged.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    person = op.create_table('person',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('tenant_id', sa.Uuid(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenant.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('tenant_id', 'name')
    )
    with op.batch_alter_table('person', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_person_tenant_id'), ['tenant_id'], unique=False)

    with op.batch_alter_table('api_key', schema=None) as batch_op:
        batch_op.add_column(sa.Column('person_id', sa.Uuid(), nullable=True))

    bind = op.get_bind()
    api_key = sa.table(
        "api_key",
        sa.column("id", sa.Uuid()),
        sa.column("tenant_id", sa.Uuid()),
        sa.column("name", sa.String()),
        sa.column("prefix", sa.String()),
        sa.column("person_id", sa.Uuid()),
    )
    keys = bind.execute(
        sa.select(api_key.c.id, api_key.c.tenant_id, api_key.c.name, api_key.c.prefix)
    ).all()
    now = datetime.now(UTC)
    names: dict[str, str] = {}
    for key_id, tenant_id, name, prefix in keys:
        person_id = uuid.uuid4()
        names[str(key_id)] = f"{name or 'key'} {prefix}"[:200]
        op.bulk_insert(
            person,
            [
                {
                    "id": person_id,
                    "tenant_id": tenant_id,
                    "name": names[str(key_id)],
                    "kind": "person",
                    "created_at": now,
                }
            ],
        )
        op.execute(api_key.update().where(api_key.c.id == key_id).values(person_id=person_id))

    with op.batch_alter_table('api_key', schema=None) as batch_op:
        batch_op.alter_column('person_id', existing_type=sa.Uuid(), nullable=False)
        batch_op.create_index(batch_op.f('ix_api_key_person_id'), ['person_id'], unique=False)
        batch_op.create_foreign_key('fk_api_key_person_id', 'person', ['person_id'], ['id'])

    op.create_table('browser_session',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('key_id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['key_id'], ['api_key.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('browser_session', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_browser_session_expires_at'), ['expires_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_browser_session_key_id'), ['key_id'], unique=False)

    with op.batch_alter_table('candidate', schema=None) as batch_op:
        batch_op.add_column(sa.Column('submitted_by', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True))
    with op.batch_alter_table('hold', schema=None) as batch_op:
        batch_op.add_column(sa.Column('reviewed_by', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True))

    # Names for what was submitted and reviewed through a key (stored as the key's id text).
    candidate = sa.table("candidate", sa.column("submitter", sa.String()), sa.column("submitted_by", sa.String()))
    hold = sa.table("hold", sa.column("reviewer", sa.String()), sa.column("reviewed_by", sa.String()))
    for key_text, name in names.items():
        op.execute(candidate.update().where(candidate.c.submitter == key_text).values(submitted_by=name))
        op.execute(hold.update().where(hold.c.reviewer == key_text).values(reviewed_by=name))


def downgrade() -> None:
    with op.batch_alter_table('hold', schema=None) as batch_op:
        batch_op.drop_column('reviewed_by')
    with op.batch_alter_table('candidate', schema=None) as batch_op:
        batch_op.drop_column('submitted_by')

    with op.batch_alter_table('browser_session', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_browser_session_key_id'))
        batch_op.drop_index(batch_op.f('ix_browser_session_expires_at'))
    op.drop_table('browser_session')

    with op.batch_alter_table('api_key', schema=None) as batch_op:
        batch_op.drop_constraint('fk_api_key_person_id', type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_api_key_person_id'))
        batch_op.drop_column('person_id')

    with op.batch_alter_table('person', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_person_tenant_id'))
    op.drop_table('person')
