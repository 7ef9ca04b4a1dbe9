"""`assaygate tenants`: which tenants may run code on this service, and an operator's allow and
revoke (docs/operations.md, "Running tenant code"); run where the database is configured."""

from __future__ import annotations

import argparse
import getpass
import json
from typing import TYPE_CHECKING, Any

from service.cli.common import data_dir_option, settings_from
from service.cli.errors import UsageError
from service.cli.keys import operator_session

if TYPE_CHECKING:
    from service.app.tenants import TenantView


def register(sub: Any) -> None:
    """Add the `tenants` command(s) to the top-level parser."""
    tenants = sub.add_parser(
        "tenants",
        help="tenants and whether they may run code (list, allow-code, revoke-code); run where "
        "the database is configured",
    )
    tenants_sub = tenants.add_subparsers(
        dest="tenants_command", required=True, parser_class=type(tenants)
    )
    listing = tenants_sub.add_parser("list", help="every tenant: may it run code, since when")
    listing.add_argument("--json", action="store_true", help="one JSON document")
    listing.set_defaults(func=_list)
    data_dir_option(listing)
    for name, allowed, text in (
        ("allow-code", True, "let a tenant's manifests name code (run on its own workers)"),
        ("revoke-code", False, "refuse a tenant's code again (its queued code shards fail)"),
    ):
        command = tenants_sub.add_parser(name, help=text)
        command.add_argument("tenant", metavar="NAME")
        command.add_argument(
            "--by", default=None, help="the operator recorded in the audit (default: $USER)"
        )
        command.set_defaults(func=_set_code, allowed=allowed)
        data_dir_option(command)


def _row(view: TenantView) -> dict[str, Any]:
    return {
        "name": view.name,
        "code_allowed": view.code_allowed,
        "code_changed_at": view.code_changed_at.isoformat() if view.code_changed_at else None,
        "code_queue": view.code_queue,
    }


def _list(args: argparse.Namespace) -> int:
    from service.app import tenants

    settings = settings_from(args)
    with operator_session(settings) as session:
        rows = [_row(view) for view in tenants.listing(session, settings)]
    if args.json:
        print(json.dumps({"items": rows}, indent=2))
        return 0
    width = max([len("NAME"), *(len(r["name"]) for r in rows)])
    print(f"{'NAME':<{width}}  CODE     SINCE")
    for r in rows:
        code = "allowed" if r["code_allowed"] else "refused"
        print(f"{r['name']:<{width}}  {code:<7}  {r['code_changed_at'] or '-'}")
    return 0


def _set_code(args: argparse.Namespace) -> int:
    from service.app import tenants
    from service.app.errors import NotFound

    settings = settings_from(args)
    command = tenants.SetCode(
        tenant=args.tenant, allowed=args.allowed, operator=args.by or operator_name()
    )
    with operator_session(settings) as session:
        try:
            view = tenants.set_code(session, settings, command)
        except NotFound:
            raise UsageError(f"no tenant {args.tenant}") from None
    print(json.dumps(_row(view), indent=2))
    return 0


def operator_name() -> str:
    """Who runs an operator's command, for its audit: the login name."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"
