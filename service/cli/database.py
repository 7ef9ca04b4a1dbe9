"""`assaygate db`: the database schema, through Alembic; and the one place a command opens the
database (`upgrade` for `serve` and `demo`, `open_engine` for the rest): every other command
reaches storage through `service.app`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from service.cli.common import data_dir_option, settings_from
from service.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Migrate the database to `revision` (the only path to the schema)."""
    from service.db import migrate

    migrate.upgrade(settings, revision)


def open_engine(settings: Settings) -> Engine:
    """The configured database's engine; the caller disposes it."""
    from service.db.session import make_engine

    return make_engine(settings)


def register(sub: Any) -> None:
    """Add the `db` command(s) to the top-level parser."""
    db = sub.add_parser("db", help="database schema (Alembic migrations)")
    db_sub = db.add_subparsers(dest="db_command", required=True, parser_class=type(db))
    up = db_sub.add_parser("upgrade", help="migrate to a revision (default: head)")
    up.add_argument("revision", nargs="?", default="head")
    up.set_defaults(func=_db_upgrade)
    down = db_sub.add_parser("downgrade", help="migrate back to a revision")
    down.add_argument("revision")
    down.set_defaults(func=_db_downgrade)
    check = db_sub.add_parser("check", help="fail if the models need a migration")
    check.set_defaults(func=_db_check)
    for command in (up, down, check):
        data_dir_option(command)


def _db_upgrade(args: argparse.Namespace) -> int:
    from sqlalchemy.engine import make_url

    from service.db import migrate

    settings = settings_from(args)
    if settings.database_is_sqlite:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    before = migrate.current(settings)
    upgrade(settings, args.revision)
    after = migrate.current(settings)
    # Say what happened, and to which database: a silent success reads like nothing ran.
    where = make_url(settings.database_url).render_as_string(hide_password=True)
    if before == after:
        print(f"db upgrade: {where} is already at revision {after} (nothing to do)")
    else:
        print(f"db upgrade: {where} migrated from revision {before or '(empty)'} to {after}")
    return 0


def _db_downgrade(args: argparse.Namespace) -> int:
    from service.db import migrate

    migrate.downgrade(settings_from(args), args.revision)
    return 0


def _db_check(args: argparse.Namespace) -> int:
    from alembic.util.exc import CommandError

    from service.db import migrate

    try:
        migrate.check(settings_from(args))
    except CommandError as exc:
        print(f"assaygate: {exc}", file=sys.stderr)
        return 1
    return 0
