"""tenant image: the operator-built image a tenant worker ran each shard's code in

Revision ID: 0015_tenant_image
Revises: 0014
Create Date: 2026-12-10 09:00:00

`assay_shard.tenant_image` is the image reference (`name@sha256:…`) a tenant worker was started
with (`ASSAYGATE_TENANT_IMAGE`), recorded with each shard whose code it ran, beside
`code_sha256`; the dossier names it as a `declared` subject. Null for shards recorded before,
and for workers started without one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0015_tenant_image"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assay_shard", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("tenant_image", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("assay_shard", schema=None) as batch_op:
        batch_op.drop_column("tenant_image")
