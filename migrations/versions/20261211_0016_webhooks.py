"""webhooks: a tenant's subscriptions, the outbox of deliveries, and each attempt

Revision ID: 0016_webhooks
Revises: 0015_tenant_image
Create Date: 2026-12-10 09:00:00

`webhook` is a tenant's subscription (events, URL, body format, signing secret; a system or all);
`webhook_delivery` is the outbox, a row per event and webhook written in the transaction of the
event, with the exact body every attempt sends; `webhook_attempt` records each attempt.
`event.kind` gets an index: `/metrics` counts refusals by kind at every scrape.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0016_webhooks"
down_revision: str | None = "0015_tenant_image"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    with op.batch_alter_table("event", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_event_kind"), ["kind"], unique=False)
    op.create_table(
        "webhook",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("system_id", sa.Uuid(), nullable=True),
        sa.Column("url", _STR(length=2000), nullable=False),
        sa.Column("format", _STR(length=16), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret", _STR(length=100), nullable=False),
        sa.Column("created_by", _STR(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["system_id"], ["system.id"]),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_webhook_tenant_id"), ["tenant_id"], unique=False)
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("webhook_id", sa.Uuid(), nullable=False),
        sa.Column("event", _STR(length=32), nullable=False),
        sa.Column("candidate_id", sa.Uuid(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", _STR(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("leased_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["webhook_id"], ["webhook.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook_delivery", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_webhook_delivery_webhook_id"), ["webhook_id"], unique=False
        )
        batch_op.create_index(
            "ix_webhook_delivery_status_next", ["status", "next_attempt_at"], unique=False
        )
    op.create_table(
        "webhook_attempt",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("delivery_id", sa.Uuid(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", _STR(length=16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", _STR(length=500), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["delivery_id"], ["webhook_delivery.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook_attempt", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_webhook_attempt_delivery_id"), ["delivery_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("webhook_attempt", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhook_attempt_delivery_id"))
    op.drop_table("webhook_attempt")
    with op.batch_alter_table("webhook_delivery", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_delivery_status_next")
        batch_op.drop_index(batch_op.f("ix_webhook_delivery_webhook_id"))
    op.drop_table("webhook_delivery")
    with op.batch_alter_table("webhook", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhook_tenant_id"))
    op.drop_table("webhook")
    with op.batch_alter_table("event", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_event_kind"))
