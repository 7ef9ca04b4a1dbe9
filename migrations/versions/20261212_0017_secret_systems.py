"""secret scopes: the systems a tenant's secret may be handed to

Revision ID: 0017_secret_systems
Revises: 0016_webhooks
Create Date: 2026-12-10 09:00:00

`tenant_secret.systems`: a JSON list of system names a manifest must belong to for it to name
the secret, or NULL for every system of the tenant (as every secret stored before was).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_secret_systems"
down_revision: str | None = "0016_webhooks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_secret") as batch:
        batch.add_column(sa.Column("systems", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenant_secret") as batch:
        batch.drop_column("systems")
