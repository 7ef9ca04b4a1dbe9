"""tenant code policy and named secrets

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 09:00:00

A tenant's manifests may name code (python, command, stdio servers, framework runners) only once an
operator allowed it (`tenant.code_allowed`, off for every existing tenant). A tenant's named
secrets (model keys for its agents) are stored encrypted under the operator's secrets key.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("code_allowed", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("code_changed_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "tenant_secret",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"]),
        sa.PrimaryKeyConstraint("tenant_id", "name"),
    )


def downgrade() -> None:
    op.drop_table("tenant_secret")
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.drop_column("code_changed_at")
        batch_op.drop_column("code_allowed")
