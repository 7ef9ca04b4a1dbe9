"""`assaygate webhooks`: a tenant's webhooks, through the API with an admin key.

`add URL` prints the new webhook with its signing secret, the only time the secret is shown;
`list` never shows one; `deliveries ID` prints each delivery with every attempt.
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

from service.app.notify import HookEvent, HookFormat
from service.cli.common import auth_headers, client_options, refused, service_client
from service.cli.errors import UsageError


def register(sub: Any) -> None:
    """Add the `webhooks` command(s) to the top-level parser."""
    hooks = sub.add_parser(
        "webhooks",
        help="where a tenant's decisions and holds are posted (signed), with an admin API key",
    )
    hooks_sub = hooks.add_subparsers(
        dest="webhooks_command", required=True, parser_class=type(hooks)
    )
    add = hooks_sub.add_parser(
        "add", help="post the tenant's events to URL; prints the secret once"
    )
    add.add_argument("url", help="http(s) URL within the egress policy")
    add.add_argument(
        "--format",
        choices=[f.value for f in HookFormat],
        default=HookFormat.JSON.value,
        help="json (default), or slack: a Slack incoming-webhook body",
    )
    add.add_argument(
        "--event",
        dest="events",
        action="append",
        choices=[e.value for e in HookEvent],
        default=None,
        help="an event to send (repeat it; default: every event)",
    )
    add.add_argument("--system", default=None, help="only this system's events (default: all)")
    add.set_defaults(func=_add)
    listing = hooks_sub.add_parser("list", help="the tenant's webhooks (never their secrets)")
    listing.set_defaults(func=_list)
    remove = hooks_sub.add_parser("remove", help="stop a webhook; its delivery log stays")
    remove.add_argument("id", help="the webhook's id, as `list` prints it")
    remove.set_defaults(func=_remove)
    log = hooks_sub.add_parser("deliveries", help="a webhook's deliveries and every attempt")
    log.add_argument("id", help="the webhook's id, as `list` prints it")
    log.set_defaults(func=_deliveries)
    for command in (add, listing, remove, log):
        command.add_argument(
            "--url",
            dest="service_url",
            default=None,
            help="default: $ASSAYGATE_URL, else http://127.0.0.1:8000",
        )
        client_options(command)


def _service(args: argparse.Namespace) -> argparse.Namespace:
    # `service_client` reads `args.url`; here `url` is the webhook's own.
    return argparse.Namespace(**{**vars(args), "url": args.service_url})


def _webhook_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise UsageError(f"id: {text!r} is not a webhook id (a UUID, as `list` prints)") from None


def _add(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"url": args.url, "format": args.format}
    if args.events:
        body["events"] = list(dict.fromkeys(args.events))
    if args.system:
        body["system"] = args.system
    with service_client(_service(args), auth_headers(args)) as client:
        response = client.post("/v1/webhooks", json=body)
    if response.status_code != 201:
        return refused(response)
    print(json.dumps(response.json(), indent=2))
    return 0


def _list(args: argparse.Namespace) -> int:
    with service_client(_service(args), auth_headers(args)) as client:
        response = client.get("/v1/webhooks")
    if response.status_code != 200:
        return refused(response)
    print(json.dumps(response.json(), indent=2))
    return 0


def _remove(args: argparse.Namespace) -> int:
    hook = _webhook_id(args.id)
    with service_client(_service(args), auth_headers(args)) as client:
        response = client.delete(f"/v1/webhooks/{hook}")
    if response.status_code != 204:
        return refused(response)
    print(json.dumps({"removed": hook}))
    return 0


def _deliveries(args: argparse.Namespace) -> int:
    hook = _webhook_id(args.id)
    with service_client(_service(args), auth_headers(args)) as client:
        response = client.get(f"/v1/webhooks/{hook}/deliveries")
    if response.status_code != 200:
        return refused(response)
    print(json.dumps(response.json(), indent=2))
    return 0
