"""The assay's plan rule and budget flags: `--rule --error --max-violation-rate` and
`--max-runs --max-seconds --max-tokens --max-cost` (docs/mcp.md, plans and budgets)."""

from __future__ import annotations

import argparse

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
