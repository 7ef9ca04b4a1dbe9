"""`assaygate policy`: the organisation's policy a tenant (or one of its systems) is held to, and
an operator's change of it (docs/operations.md, "Organisation policy"); run where the database
and the signing keys are configured: a change reopens gates, which signs dossier versions."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.cli.common import data_dir_option, settings_from
from service.cli.errors import UsageError
from service.cli.keys import operator_session
from service.cli.tenants import operator_name

if TYPE_CHECKING:
    from service.app.policies import PolicyView
    from service.core.signing.dossier import Signer
    from service.settings import Settings


def register(sub: Any) -> None:
    """Add the `policy` command(s) to the top-level parser."""
    policy = sub.add_parser(
        "policy",
        help="the organisation's policy per tenant and system (show, set); run where the "
        "database and the signing keys are configured",
    )
    policy_sub = policy.add_subparsers(
        dest="policy_command", required=True, parser_class=type(policy)
    )
    show = policy_sub.add_parser(
        "show", help="the policy in force for a tenant (or one system) and each scope's version"
    )
    show.add_argument("tenant", metavar="TENANT")
    show.add_argument("--system", default=None, help="one system's policy in force")
    show.add_argument("--json", action="store_true", help="one JSON document")
    show.set_defaults(func=_show)
    data_dir_option(show)
    put = policy_sub.add_parser(
        "set",
        help="a new version of a tenant's (or one system's) policy from a JSON file; it "
        "reopens each standing dossier assayed under another policy",
    )
    put.add_argument("tenant", metavar="TENANT")
    put.add_argument("file", metavar="FILE", type=Path, help="the policy, a JSON object")
    put.add_argument("--system", default=None, help="set one system's policy, not the tenant's")
    put.add_argument(
        "--by", default=None, help="the operator recorded in the audit (default: $USER)"
    )
    put.set_defaults(func=_set)
    data_dir_option(put)


def view_document(view: PolicyView) -> dict[str, Any]:
    """What `show --json` prints, `set` answers and `GET /v1/policy` serves, the same fields."""
    force = view.force
    return {
        "tenant": force.tenant,
        "system": force.system,
        "digest": force.digest,
        "versions": force.versions,
        "policy": force.policy.document(),
        "layers": [
            {
                "system": layer.system,
                "version": layer.version,
                "digest": layer.digest,
                "policy": layer.policy.document(),
                "set_by": layer.set_by,
                "set_at": layer.set_at.isoformat(),
            }
            for layer in view.layers
        ],
    }


def _show(args: argparse.Namespace) -> int:
    from service.app import policies

    settings = settings_from(args)
    with operator_session(settings) as session:
        view = policies.show_by_name(session, args.tenant, args.system)
    document = view_document(view)
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    where = f"tenant {args.tenant}" + (f", system {args.system}" if args.system else "")
    versions = ", ".join(f"{k} v{v}" for k, v in document["versions"].items())
    print(f"policy in force for {where}: {document['digest'][:12]} ({versions})")
    print(json.dumps(document["policy"], indent=2, sort_keys=True))
    for layer in document["layers"]:
        scope = f"system {layer['system']}" if layer["system"] else "tenant"
        print(f"  {scope}: version {layer['version']}, set by {layer['set_by']} {layer['set_at']}")
    return 0


def _set(args: argparse.Namespace) -> int:
    from service.app import changes

    settings = settings_from(args)
    try:
        document = json.loads(args.file.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{args.file} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError(f"{args.file} must hold a JSON object")
    command = changes.SetPolicy(args.tenant, args.system, document, args.by or operator_name())
    with operator_session(settings) as session:
        done = changes.set_policy(session, _signer(settings), command)
    print(
        json.dumps(
            {**view_document(done.view), "changed": done.changed, "reopened": done.reopened},
            indent=2,
        )
    )
    return 0


def _signer(settings: Settings) -> Signer:
    """The service's active signing key: never a new one, which no verifier would know."""
    from service.keys import INDEX, KeyRing

    keys_dir = settings.keys_dir
    if keys_dir is None or not (keys_dir / INDEX).is_file():
        raise UsageError(
            f"no signing keys at {keys_dir}: a policy change signs the dossiers it reopens; run "
            "this where the service keeps its keys (pass --data-dir, or set ASSAYGATE_KEYS_DIR)"
        )
    return KeyRing(keys_dir).load_or_create()
