"""`assaygate keys`: signing keys (rotate, list) and API keys (create, revoke, list-api)."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from service.cli.errors import UsageError
from service.settings import Settings, get_settings


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
    listing = keys_sub.add_parser("list", help="print every published key (GET /v1/keys)")
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


def _keys_rotate(_args: argparse.Namespace) -> int:
    from service.keys import KeyRing

    settings = get_settings()
    assert settings.keys_dir is not None
    signer = KeyRing(settings.keys_dir).rotate()
    print(json.dumps({"active": signer.keyid, "keys_dir": str(settings.keys_dir)}, indent=2))
    return 0


def _keys_list(_args: argparse.Namespace) -> int:
    from service.keys import KeyRing

    settings = get_settings()
    assert settings.keys_dir is not None
    published = KeyRing(settings.keys_dir).published()
    print(json.dumps({"keys": [k.view() for k in published]}, indent=2))
    return 0


def _keys_create(args: argparse.Namespace) -> int:
    from sqlmodel import Session

    from service.db.apikey import KeyRequestInvalid, create_key, key_row
    from service.db.models import PersonKind, Role
    from service.db.session import make_engine

    tenant = args.tenant.strip()
    if not tenant or len(tenant) > 100:
        raise UsageError("--tenant must be 1 to 100 characters")
    engine = make_engine(get_settings())
    try:
        with Session(engine) as session:
            try:
                created = create_key(
                    session,
                    tenant=tenant,
                    roles=[Role(r) for r in args.roles],
                    name=args.name,
                    person=args.person or args.service_account,
                    kind=PersonKind.SERVICE if args.service_account else PersonKind.PERSON,
                )
            except KeyRequestInvalid as exc:
                flag = {"kind": "--person/--service-account", "person": "--person"}
                raise UsageError(f"{flag.get(exc.field, exc.field)}: {exc.message}") from None
            session.commit()
            row = key_row(session, created.key.id)
            assert row is not None
            view = _key_view(row)
    finally:
        engine.dispose()
    print(json.dumps({**view, "key": created.secret}, indent=2))
    print("Keep the key now: it is stored only as a hash and never shown again.", file=sys.stderr)
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    from sqlmodel import Session

    from service.db.apikey import get_key, key_row, revoke
    from service.db.session import make_engine

    try:
        key_id = uuid.UUID(args.key_id)
    except ValueError as exc:
        raise UsageError(f"not a key id: {args.key_id}") from exc
    engine = make_engine(get_settings())
    try:
        with Session(engine) as session:
            key = get_key(session, key_id, None)
            if key is None:
                raise UsageError(f"no API key {key_id}")
            revoke(session, key)
            session.commit()
            row = key_row(session, key.id)
            assert row is not None
            print(json.dumps(_key_view(row), indent=2))
    finally:
        engine.dispose()
    return 0


def _keys_list_api(args: argparse.Namespace) -> int:
    from sqlmodel import Session

    from service.db.apikey import keys, tenant_by_name
    from service.db.session import make_engine

    engine = make_engine(get_settings())
    try:
        with Session(engine) as session:
            tenant_id = None
            if args.tenant is not None:
                tenant = tenant_by_name(session, args.tenant)
                if tenant is None:
                    raise UsageError(f"no tenant {args.tenant}")
                tenant_id = tenant.id
            items = [_key_view(row) for row in keys(session, tenant_id)]
    finally:
        engine.dispose()
    print(json.dumps({"items": items}, indent=2))
    return 0


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
        "prefix": key.prefix,
        "created_at": key.created_at.isoformat(),
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


def first_admin_key(settings: Settings) -> str | None:
    """Embedded first start: with no API key at all, make one (shown once, by `_announce`)."""
    from sqlmodel import Session

    from service.db.apikey import DEFAULT_TENANT, any_key, create_key
    from service.db.models import Role
    from service.db.session import make_engine

    engine = make_engine(settings)
    try:
        with Session(engine) as session:
            if any_key(session):
                return None
            created = create_key(
                session,
                tenant=DEFAULT_TENANT,
                roles=list(Role),
                name="first admin key",
                person="admin",
            )
            session.commit()
    finally:
        engine.dispose()
    return created.secret
