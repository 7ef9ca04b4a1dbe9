"""indexes for the gate read (one indexed lookup per step, no writes) and the lapse reconciler

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 09:00:00

The gate read no longer writes: a lapsed waiver reads as `hold` at once and the reconciler signs
the version that records it. These composite indexes serve each step of that read (a system's
newest candidate or the one of a version, a candidate's newest assay, its reviews, its system's
reported changes and last allowed dossier) and the reconciler's search for lapsed reviews.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES: tuple[tuple[str, str, list[str]], ...] = (
    ('candidate', 'ix_candidate_system_id_created_at', ['system_id', 'created_at', 'id']),
    ('candidate', 'ix_candidate_system_id_version', ['system_id', 'version']),
    ('assay', 'ix_assay_candidate_id_created_at', ['candidate_id', 'created_at', 'id']),
    ('dossier', 'ix_dossier_system_id_decision', ['system_id', 'decision']),
    (
        'dossier',
        'ix_dossier_system_id_candidate_id_version',
        ['system_id', 'candidate_id', 'version'],
    ),
    ('hold', 'ix_hold_candidate_id_status', ['candidate_id', 'status']),
    ('hold', 'ix_hold_status_expires_at', ['status', 'expires_at']),
    ('config_change', 'ix_config_change_system_id_created_at', ['system_id', 'created_at']),
)


def upgrade() -> None:
    for table, name, columns in INDEXES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.create_index(name, columns, unique=False)


def downgrade() -> None:
    for table, name, _ in reversed(INDEXES):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(name)
