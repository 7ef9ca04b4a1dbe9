"""shard leases: a shard not done holds a lease, and counts the messages sent for it

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 09:00:00

A shard's lease runs from its dispatch while it waits in the queue, then from each heartbeat of
the worker running it; the reconciler sends a shard whose lease lapsed again, and fails the
assay once a shard has been started or sent too often. Shards recorded before this revision were
each sent once; their lease is left empty, which the reconciler reads as lapsed, so an upgrade
with assays in flight re-sends their unfinished shards once (a copy of a shard that is still
queued or running finds it stored or leased, and changes nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assay_shard", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("dispatches", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True)
        )
    op.execute("UPDATE assay_shard SET dispatches = 1")


def downgrade() -> None:
    with op.batch_alter_table("assay_shard", schema=None) as batch_op:
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("dispatches")
