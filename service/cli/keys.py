"""`assaygate keys`: signing keys (rotate, list) and API keys (create, revoke, list-api)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.cli.common import data_dir_option, settings_from
from service.cli.errors import UsageError
from service.settings import Settings, get_settings

if TYPE_CHECKING:
    from sqlmodel import Session


def register(sub: Any) -> None:
    """Add the `keys` command(s) to the top-level parser."""
    keys = sub.add_parser(
        "keys",
        help="signing keys (rotate, list) and API keys (create, revoke, list-api); run where "
        "the keys and the database are configured",
    )
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, parser_class=type(keys))
    rotate = keys_sub.add_parser("rotate", help="retire the active key and make a new one")
    rotate.set_defaults(func=_keys_rotate)
    listing = keys_sub.add_parser(
        "list",
        help="print every published key (GET /v1/keys), marking the active one (`active`)",
    )
    listing.set_defaults(func=_keys_list)
    create = keys_sub.add_parser(
        "create", help="create an API key for a tenant (created if new); prints the key once"
    )
    create.add_argument("--tenant", required=True, help="the team the key acts for")
    create.add_argument(
        "--role",
        dest="roles",
        action="append",
        required=True,
        choices=("submitter", "reviewer", "admin"),
        help="repeat for several roles",
    )
    create.add_argument("--name", default=None, help="what the key is for, e.g. ci-main")
    holder = create.add_mutually_exclusive_group(required=True)
    holder.add_argument(
        "--person", default=None, help="the person who holds the key, e.g. 'Ada Lovelace'"
    )
    holder.add_argument(
        "--service-account", default=None, metavar="NAME", help="or the service account, e.g. ci"
    )
    create.set_defaults(func=_keys_create)
    revoke = keys_sub.add_parser("revoke", help="revoke an API key by its id (refused at once)")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=_keys_revoke)
    list_api = keys_sub.add_parser("list-api", help="list API keys (never the keys themselves)")
    list_api.add_argument("--tenant", default=None)
    list_api.set_defaults(func=_keys_list_api)
    for command in (rotate, listing, create, revoke, list_api):
        data_dir_option(command)


def _keys_rotate(args: argparse.Namespace) -> int:
    from service.keys import KeyRing

    settings = settings_from(args)
    assert settings.keys_dir is not None
    signer = KeyRing(settings.keys_dir).rotate()
    print(json.dumps({"active": signer.keyid, "keys_dir": str(settings.keys_dir)}, indent=2))
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    from service.keys import KeyRing

    settings = settings_from(args)
    assert settings.keys_dir is not None
    published = KeyRing(settings.keys_dir).published()
    # The key that signs now: the last one whose window is still open (as KeyRing loads it).
    open_keys = [k.keyid for k in published if k.not_after is None]
    active = open_keys[-1] if open_keys else None
    keys = [{**k.view(), "active": k.keyid == active} for k in published]
    print(json.dumps({"active": active, "keys": keys}, indent=2))
    return 0


def _keys_create(args: argparse.Namespace) -> int:
    from service.app import keys
    from service.app.records import KeyRole, PersonKind

    command = keys.OperatorMint(
        tenant=args.tenant,
        roles=[KeyRole(r) for r in args.roles],
        name=args.name,
        person=args.person or args.service_account,
        kind=PersonKind.SERVICE if args.service_account else PersonKind.PERSON,
    )
    with operator_session(settings_from(args)) as session:
        minted = keys.mint_as_operator(session, command)
    print(json.dumps({**_key_view(minted.row), "key": minted.secret}, indent=2))
    print("Keep the key now: it is stored only as a hash and never shown again.", file=sys.stderr)
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    from service.app import keys

    try:
        key_id = uuid.UUID(args.key_id)
    except ValueError as exc:
        raise UsageError(f"not a key id: {args.key_id}") from exc
    with operator_session(settings_from(args)) as session:
        row = keys.revoke_as_operator(session, key_id)
    print(json.dumps(_key_view(row), indent=2))
    return 0


def _keys_list_api(args: argparse.Namespace) -> int:
    from service.app import keys

    with operator_session(settings_from(args)) as session:
        items = [_key_view(row) for row in keys.listing(session, args.tenant)]
    print(json.dumps({"items": items}, indent=2))
    return 0


@contextlib.contextmanager
def operator_session(settings: Settings | None = None) -> Iterator[Session]:
    """A session on the configured database (or `settings`'), its engine disposed after."""
    from sqlalchemy.engine import make_url
    from sqlmodel import Session

    from service.cli.database import open_engine

    settings = settings or get_settings()
    if settings.database_is_sqlite:
        # SQLite would create an empty file (or fail on a missing folder) and the command would
        # then fail on a missing table: say where it looked instead.
        path = make_url(settings.database_url).database
        if path and path != ":memory:" and not Path(path).is_file():
            raise UsageError(
                f"no database at {path}: run this where `assaygate serve` keeps its data, "
                "or pass --data-dir (or set ASSAYGATE_DATA_DIR or ASSAYGATE_DATABASE_URL)"
            )
    engine = open_engine(settings)
    try:
        with Session(engine) as session:
            yield session
    finally:
        engine.dispose()


def _key_view(row: Any) -> dict[str, Any]:
    key = row.key
    return {
        "id": str(key.id),
        "tenant": row.tenant.name,
        "roles": list(key.roles),
        "name": key.name,
        "person": row.person.name,
        "kind": row.person.kind,
        "minted_by": row.minted_by.name if row.minted_by else None,
        "created_at": key.created_at.isoformat(),
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


def first_admin_key(settings: Settings) -> str | None:
    """Embedded first start: with no API key at all, make one (shown once, by `_announce`)."""
    from service.app import keys

    with operator_session(settings) as session:
        minted = keys.first_admin(session)
    return minted.secret if minted else None
