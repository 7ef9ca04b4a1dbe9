"""shard progress: what a running shard's worker is doing, written with its heartbeat

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 09:00:00

A running shard's worker writes its engine's activity beside the lease at every heartbeat: runs
done, slots busy and what each busy slot waits for (`agent`, `reset`, `probe`, ...). The API,
`submit --wait` and the candidate page read it. Empty for shards recorded before, and for targets
that run in the worker's own process (the reference target: nothing waits).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assay_shard", schema=None) as batch_op:
        batch_op.add_column(sa.Column("progress", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("assay_shard", schema=None) as batch_op:
        batch_op.drop_column("progress")
