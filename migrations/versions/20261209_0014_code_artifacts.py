"""code artifacts: a tenant's code by digest, what each candidate names and what its shards ran

Revision ID: 0014
Revises: 0013_policy
Create Date: 2026-12-09 09:00:00

`artifact` holds a tenant's uploaded code (`POST /v1/artifacts`), one row per tenant and SHA-256,
the bytes as uploaded. A candidate may name one (`candidate.code_sha256`); a shard records the
code its worker ran (`assay_shard.code_sha256`: the candidate's artifact, hashed again, or the
operator's folder, packed and hashed). `candidate_artifact` lists the artifacts a candidate's
dossier names as subjects, with their assurance, so the deploy gate can ask by digest. Empty for
candidates recorded before: their dossiers keep their one subject.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013_policy"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "artifact",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"]),
        sa.PrimaryKeyConstraint("tenant_id", "sha256"),
    )
    op.create_table(
        "candidate_artifact",
        sa.Column("candidate_id", sa.Uuid(), nullable=False),
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("assurance", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("source", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"]),
        sa.PrimaryKeyConstraint("candidate_id", "sha256"),
    )
    with op.batch_alter_table("candidate_artifact", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_candidate_artifact_sha256"), ["sha256"], unique=False)
    with op.batch_alter_table("candidate", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("code_sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
    with op.batch_alter_table("assay_shard", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("code_sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )


def downgrade() -> None:
    # SQLite drops a column in place (3.35+): a batch copy would recreate `candidate` and
    # `assay_shard` under the gate-epoch triggers of 0009 that name them.
    for table in ("assay_shard", "candidate"):
        if op.get_bind().dialect.name == "sqlite":
            op.execute(f"ALTER TABLE {table} DROP COLUMN code_sha256")
        else:
            op.drop_column(table, "code_sha256")
    with op.batch_alter_table("candidate_artifact", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_candidate_artifact_sha256"))
    op.drop_table("candidate_artifact")
    op.drop_table("artifact")
