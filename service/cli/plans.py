"""The assay's plan rule and budget flags: `--rule --error --max-violation-rate` and
`--max-runs --max-seconds --max-tokens --max-cost` (docs/mcp.md, plans and budgets); the
`--policy` a local assay is held to; reading the files they name."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from service.core.decision.policy import OrgPolicy, parse_policy, tighten
from service.core.errors import ManifestInvalid, PolicyInvalid
from service.core.faults.plan import AssayPlan
from service.core.system.manifest import Manifest

# Budgets: exceeding one stops the assay with the reason `budget` (a hold, never `allow`).
_BUDGETS: tuple[tuple[str, type, str], ...] = (
    ("--max-runs", int, "stop after this many agent runs (every arm)"),
    ("--max-seconds", float, "stop after this many seconds of agent runs"),
    ("--max-tokens", int, "stop once the agent reports this many tokens"),
    ("--max-cost", float, "stop once the agent reports this much cost"),
)


def rule_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rule",
        choices=("sequential", "fixed"),
        default=None,
        help="sequential: a fault stops once its decision cannot change at --error (default "
        "for mcp and framework targets); fixed: every fault runs --trials",
    )
    p.add_argument("--error", type=float, default=None, help="the sequential plan's error (0.05)")
    p.add_argument(
        "--max-violation-rate",
        type=float,
        default=None,
        metavar="RATE",
        help="a sequential fault stops once violations are bounded below RATE",
    )
    budget_args(p)


def budget_args(p: argparse.ArgumentParser) -> None:
    """`--max-runs --max-seconds --max-tokens --max-cost`."""
    for flag, kind, text in _BUDGETS:
        p.add_argument(flag, type=kind, default=None, help=text)


def rule_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The plan keys the flags set (the plan's own validation names a bad value's field)."""
    data: dict[str, object] = {
        key: getattr(args, key)
        for key in ("rule", "error", "max_violation_rate")
        if getattr(args, key, None) is not None
    }
    budgets = {
        key: getattr(args, key)
        for key in ("max_runs", "max_seconds", "max_tokens", "max_cost")
        if getattr(args, key, None) is not None
    }
    if budgets:
        data["stop"] = budgets
    return data


def read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestInvalid(f"cannot read {what} {path}: {exc.strerror}", field=what) from None
    except UnicodeDecodeError:
        raise ManifestInvalid(f"{path} is not UTF-8 text", field=what) from None


def load_policy(path: str) -> OrgPolicy:
    try:
        data = json.loads(read_text(path, "policy"))
    except json.JSONDecodeError as exc:
        raise PolicyInvalid(f"malformed policy JSON: {exc}", field="--policy") from None
    return parse_policy(data)


def held_to(policy: OrgPolicy, manifest: Manifest, plan: AssayPlan) -> AssayPlan:
    """The plan (its envelope included) the service would run under `policy`."""
    return tighten(policy, manifest.envelope, plan, manifest.target.kind).plan
