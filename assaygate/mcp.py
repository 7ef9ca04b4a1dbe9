"""What an MCP runner's agent needs from Assaygate: its proxy URL, claims, and the `lines` loop.

The agent talks MCP to the proxy with any SDK; this module only names the contract around it
(docs/mcp.md, "Claims and runners"): where the run's proxy URL is, what a claim looks like, and
the warm `command` runner's one-line-per-run protocol. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any

__all__ = [
    "MCP_URL_ENV",
    "STATUSES",
    "Claim",
    "ClaimInvalid",
    "claim",
    "mcp_url",
    "serve_lines",
]

#: The variable a `command` runner's process reads its run's proxy URL from.
MCP_URL_ENV = "ASSAYGATE_MCP_URL"
STATUSES = frozenset({"completed", "denied", "held", "failed"})

Claim = dict[str, Any]


class ClaimInvalid(ValueError):
    """A claim Assaygate would refuse as a target error: said before it leaves the agent."""


def mcp_url(environ: Mapping[str, str] | None = None) -> str:
    """The run's proxy URL (`command` runners); `lines` and `http` runners get it per run."""
    env = os.environ if environ is None else environ
    url = env.get(MCP_URL_ENV)
    if not url:
        raise LookupError(f"{MCP_URL_ENV} is not set: run the agent under an Assaygate runner")
    return url


def claim(status: str, effect_id: str | None = None, *, anomaly: bool = False) -> Claim:
    """One claim: `claim("completed", "s-1")`, `claim("denied")`, `claim("held", anomaly=True)`."""
    if status not in STATUSES:
        raise ClaimInvalid(f"status {status!r} is not one of {sorted(STATUSES)}")
    if (status == "completed") != (effect_id is not None):
        raise ClaimInvalid("a completed claim names its effect_id, and only a completed one")
    out: Claim = {"status": status}
    if effect_id is not None:
        out["effect_id"] = effect_id
    if anomaly:
        out["anomaly"] = True
    return out


def serve_lines(
    run: Callable[[dict[str, Any], str], Claim | list[Claim]],
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
) -> None:
    """The `command` runner's `"protocol": "lines"` loop: for each `{"task", "mcp_url"}` line,
    call `run(task, mcp_url)` and write its claim (or `{"claims": [...]}`) as one line, until
    stdin closes. Load models and clients before calling it: the process serves every run."""
    source = sys.stdin if stdin is None else stdin
    sink = sys.stdout if stdout is None else stdout
    for line in source:
        if not line.strip():
            continue
        request = json.loads(line)
        result = run(request["task"], request["mcp_url"])
        body = {"claims": result} if isinstance(result, list) else result
        sink.write(json.dumps(body) + "\n")
        sink.flush()
