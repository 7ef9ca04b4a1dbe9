"""organisation policy: versioned per tenant and system, and the one each assay ran under

Revision ID: 0013_policy
Revises: 0012
Create Date: 2026-12-08 09:00:00

Operators set the bar a manifest's `envelope` and a plan may raise and never lower
(docs/operations.md, "Organisation policy"): `org_policy` holds every version of a tenant's policy (`system` empty) and of a system's (by
name), only ever added to. An assay records the policy it was planned under (its digest, the
versions it combines and its document); empty for assays recorded before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0013_policy"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "org_policy",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("system", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("digest", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("set_by", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "system", "version"),
    )
    with op.batch_alter_table("org_policy", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_org_policy_tenant_id"), ["tenant_id"], unique=False)
    with op.batch_alter_table("assay", schema=None) as batch_op:
        batch_op.add_column(sa.Column("policy", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("assay", schema=None) as batch_op:
        batch_op.drop_column("policy")
    with op.batch_alter_table("org_policy", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_org_policy_tenant_id"))
    op.drop_table("org_policy")
