"""tenants and API keys; systems belong to a tenant; audit events name theirs

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 09:00:00

Every existing system is moved into a tenant named `default` (created here), so a deployment
that upgrades keeps its history; its first admin key then belongs to that tenant. A system's
name becomes unique per tenant instead of globally, and idempotency keys are stored prefixed
with the tenant (wider column). API keys keep only the SHA-256 of the secret.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Fixed, so every database calls its backfilled tenant by the same id.
DEFAULT_TENANT_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
# Names the unnamed UNIQUE(name) of revision 0001 when SQLite's table is reflected.
NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def _old_unique_name() -> str:
    return "system_name_key" if op.get_bind().dialect.name == "postgresql" else "uq_system_name"


def upgrade() -> None:
    tenant = op.create_table('tenant',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('api_key',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('tenant_id', sa.Uuid(), nullable=False),
    sa.Column('roles', sa.JSON(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('prefix', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('key_sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('created_by', sa.Uuid(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenant.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('key_sha256')
    )
    with op.batch_alter_table('api_key', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_key_tenant_id'), ['tenant_id'], unique=False)

    bind = op.get_bind()
    has_systems = bind.execute(sa.text("SELECT count(*) FROM system")).scalar_one() > 0
    if has_systems:
        op.bulk_insert(
            tenant,
            [{"id": DEFAULT_TENANT_ID, "name": "default", "created_at": datetime.now(UTC)}],
        )

    with op.batch_alter_table('system', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tenant_id', sa.Uuid(), nullable=True))
    if has_systems:
        system = sa.table("system", sa.column("tenant_id", sa.Uuid()))
        op.execute(system.update().values(tenant_id=DEFAULT_TENANT_ID))
    with op.batch_alter_table('system', schema=None, naming_convention=NAMING) as batch_op:
        batch_op.alter_column('tenant_id', existing_type=sa.Uuid(), nullable=False)
        batch_op.drop_constraint(_old_unique_name(), type_='unique')
        batch_op.create_index(batch_op.f('ix_system_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_unique_constraint('uq_system_tenant_id_name', ['tenant_id', 'name'])
        batch_op.create_foreign_key('fk_system_tenant_id', 'tenant', ['tenant_id'], ['id'])

    # Adding a nullable column never rebuilds the table, so the append-only trigger stays.
    with op.batch_alter_table('event', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tenant_id', sa.Uuid(), nullable=True))
        batch_op.create_index(batch_op.f('ix_event_tenant_id'), ['tenant_id'], unique=False)

    with op.batch_alter_table('idempotency_key', schema=None) as batch_op:
        batch_op.alter_column('key',
               existing_type=sa.VARCHAR(length=200),
               type_=sqlmodel.sql.sqltypes.AutoString(length=240),
               existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('idempotency_key', schema=None) as batch_op:
        batch_op.alter_column('key',
               existing_type=sqlmodel.sql.sqltypes.AutoString(length=240),
               type_=sa.VARCHAR(length=200),
               existing_nullable=False)

    with op.batch_alter_table('event', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_event_tenant_id'))
        batch_op.drop_column('tenant_id')

    with op.batch_alter_table('system', schema=None, naming_convention=NAMING) as batch_op:
        batch_op.drop_constraint('fk_system_tenant_id', type_='foreignkey')
        batch_op.drop_constraint('uq_system_tenant_id_name', type_='unique')
        batch_op.drop_index(batch_op.f('ix_system_tenant_id'))
        batch_op.create_unique_constraint(_old_unique_name(), ['name'])
        batch_op.drop_column('tenant_id')

    with op.batch_alter_table('api_key', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_key_tenant_id'))

    op.drop_table('api_key')
    op.drop_table('tenant')
