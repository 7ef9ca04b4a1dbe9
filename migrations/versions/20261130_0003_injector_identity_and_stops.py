"""injector identity and stop conditions

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 07:05:00

Each assay carries the signed injector credential its shards run under, its declared stop
conditions, running totals of effects, unsafe escapes and target errors, and why it stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assay", schema=None) as batch_op:
        batch_op.add_column(sa.Column("credential", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("limits", sa.JSON(none_as_null=True), nullable=True))
        batch_op.add_column(sa.Column("effects", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("unsafe", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(
            sa.Column("target_errors", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("stop_reason", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=True)
        )
        batch_op.add_column(sa.Column("aborted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("assay", schema=None) as batch_op:
        batch_op.drop_column("aborted_at")
        batch_op.drop_column("stop_reason")
        batch_op.drop_column("target_errors")
        batch_op.drop_column("unsafe")
        batch_op.drop_column("effects")
        batch_op.drop_column("limits")
        batch_op.drop_column("credential")
