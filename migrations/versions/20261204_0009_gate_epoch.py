"""gate epoch: a system's counter of writes that can change what its gate says

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 09:00:00

The gate read answers from a per-process cache keyed by the system's `gate_epoch`, read in the
same indexed lookup that finds the system. The database bumps the counter itself, with triggers on
every table the answer is computed from (a system's candidates, their assays and reviews, its
dossiers and reported changes, and its trigger components), so no write path can forget to: a
write that could change the answer commits with a new epoch, and an answer cached under the old
one is never served again. The bump is an UPDATE of the system's row, so epochs become visible in
commit order (a reader that sees epoch n sees every write counted in it).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# table -> how a row names its system (NEW or OLD is put in front)
DIRECT = "system_id"
VIA_CANDIDATE = "candidate_id"
TABLES: tuple[tuple[str, str], ...] = (
    ("candidate", DIRECT),
    ("dossier", DIRECT),
    ("config_change", DIRECT),
    ("assay", VIA_CANDIDATE),
    ("hold", VIA_CANDIDATE),
)
EVENTS = ("INSERT", "UPDATE", "DELETE")
# An assay's row changes with every stored shard (its counters); the gate reads only these, so
# storing shards does not contend for the system's row.
UPDATED_COLUMNS = {"assay": "status, decision, catalogue"}


def _update_of(table: str) -> str:
    columns = UPDATED_COLUMNS.get(table)
    return f"UPDATE OF {columns}" if columns else "UPDATE"


def _system_of(table_ref: str, how: str) -> str:
    if how == DIRECT:
        return f"{table_ref}.system_id"
    return f"(SELECT system_id FROM candidate WHERE id = {table_ref}.candidate_id)"


def upgrade() -> None:
    with op.batch_alter_table("system", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("gate_epoch", sa.BigInteger(), nullable=False, server_default="0")
        )
    if op.get_bind().dialect.name == "postgresql":
        _postgres_triggers()
    else:
        _sqlite_triggers()


def _postgres_triggers() -> None:
    for table, how in TABLES:
        op.execute(
            f"""
            CREATE FUNCTION gate_epoch_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF TG_OP <> 'INSERT' THEN
                UPDATE system SET gate_epoch = gate_epoch + 1 WHERE id = {_system_of("OLD", how)};
              END IF;
              IF TG_OP <> 'DELETE' THEN
                UPDATE system SET gate_epoch = gate_epoch + 1 WHERE id = {_system_of("NEW", how)};
              END IF;
              RETURN NULL;
            END $$
            """
        )
        op.execute(
            f"CREATE TRIGGER gate_epoch_{table} AFTER INSERT OR {_update_of(table)} OR DELETE "
            f"ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION gate_epoch_{table}()"
        )
    # `json` has no equality: compare the text.
    op.execute(
        """
        CREATE FUNCTION gate_epoch_system() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF OLD.triggers::text IS DISTINCT FROM NEW.triggers::text THEN
            NEW.gate_epoch := OLD.gate_epoch + 1;
          END IF;
          RETURN NEW;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER gate_epoch_system BEFORE UPDATE OF triggers ON system "
        "FOR EACH ROW EXECUTE FUNCTION gate_epoch_system()"
    )


def _sqlite_triggers() -> None:
    for table, how in TABLES:
        for event in EVENTS:
            rows = {"INSERT": ("NEW",), "UPDATE": ("OLD", "NEW"), "DELETE": ("OLD",)}[event]
            body = " ".join(
                f"UPDATE system SET gate_epoch = gate_epoch + 1 WHERE id = {_system_of(r, how)};"
                for r in rows
            )
            what = _update_of(table) if event == "UPDATE" else event
            op.execute(
                f"CREATE TRIGGER gate_epoch_{table}_{event.lower()} AFTER {what} ON {table} "
                f"FOR EACH ROW BEGIN {body} END"
            )
    op.execute(
        "CREATE TRIGGER gate_epoch_system AFTER UPDATE OF triggers ON system FOR EACH ROW "
        "WHEN OLD.triggers IS NOT NEW.triggers "
        "BEGIN UPDATE system SET gate_epoch = gate_epoch + 1 WHERE id = NEW.id; END"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in (*(t for t, _ in TABLES), "system"):
            op.execute(f"DROP TRIGGER IF EXISTS gate_epoch_{table} ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS gate_epoch_{table}()")
    else:
        for table, _ in TABLES:
            for event in EVENTS:
                op.execute(f"DROP TRIGGER IF EXISTS gate_epoch_{table}_{event.lower()}")
        op.execute("DROP TRIGGER IF EXISTS gate_epoch_system")
    with op.batch_alter_table("system", schema=None) as batch_op:
        batch_op.drop_column("gate_epoch")
