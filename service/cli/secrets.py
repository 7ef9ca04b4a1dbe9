"""`assaygate secrets`: a tenant admin's named secrets, through the API with an admin key.

`put NAME` reads the value from stdin (without echo on a terminal) or from the environment
variable `--from-env` names — never from the command line, where `ps` and shell history would
show it. Nothing prints a value: `put` prints the name and when it was written.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import Any

from service.cli.common import auth_headers, client_options, refused, service_client
from service.cli.errors import UsageError
from service.core.system.secret import check_name, check_value


def register(sub: Any) -> None:
    """Add the `secrets` command(s) to the top-level parser."""
    secrets = sub.add_parser(
        "secrets",
        help="a tenant's named secrets (model keys for its agents), with an admin API key",
    )
    secrets_sub = secrets.add_subparsers(
        dest="secrets_command", required=True, parser_class=type(secrets)
    )
    put = secrets_sub.add_parser(
        "put",
        aliases=["set"],
        help="store (or replace) a secret; the value comes from stdin or --from-env",
    )
    put.add_argument("name", help="e.g. OPENAI_API_KEY, as a manifest's target.secrets names it")
    put.add_argument(
        "--from-env",
        metavar="VAR",
        default=None,
        help="read the value from this environment variable instead of stdin",
    )
    put.add_argument(
        "--systems",
        metavar="A,B",
        default=None,
        help="only manifests of these systems may name it (default: every system)",
    )
    put.set_defaults(func=_put)
    listing = secrets_sub.add_parser("list", help="the tenant's secrets by name (never values)")
    listing.set_defaults(func=_list)
    delete = secrets_sub.add_parser("delete", help="delete a secret")
    delete.add_argument("name")
    delete.set_defaults(func=_delete)
    for command in (put, listing, delete):
        command.add_argument(
            "--url", default=None, help="default: $ASSAYGATE_URL, else http://127.0.0.1:8000"
        )
        client_options(command)


def read_value(args: argparse.Namespace) -> str:
    """The value from `--from-env VAR`, else stdin (one trailing line break dropped)."""
    if args.from_env is not None:
        value = os.environ.get(args.from_env)
        if value is None:
            raise UsageError(f"--from-env: the environment has no variable {args.from_env}")
        return value
    if sys.stdin.isatty():
        return getpass.getpass(f"value of {args.name}: ")
    value = sys.stdin.read()
    if value.endswith("\n"):
        value = value[:-1]
        if value.endswith("\r"):
            value = value[:-1]
    return value


def _put(args: argparse.Namespace) -> int:
    check_name(args.name)
    value = read_value(args)
    check_value(value)
    body: dict[str, object] = {"value": value}
    if args.systems is not None:
        body["systems"] = [s.strip() for s in args.systems.split(",") if s.strip()]
    with service_client(args, auth_headers(args)) as client:
        response = client.put(f"/v1/secrets/{args.name}", json=body)
    if response.status_code != 200:
        return refused(response)
    print(json.dumps(response.json(), indent=2))
    return 0


def _list(args: argparse.Namespace) -> int:
    with service_client(args, auth_headers(args)) as client:
        response = client.get("/v1/secrets")
    if response.status_code != 200:
        return refused(response)
    print(json.dumps(response.json(), indent=2))
    return 0


def _delete(args: argparse.Namespace) -> int:
    check_name(args.name)
    with service_client(args, auth_headers(args)) as client:
        response = client.delete(f"/v1/secrets/{args.name}")
    if response.status_code != 204:
        return refused(response)
    print(json.dumps({"deleted": args.name}))
    return 0
