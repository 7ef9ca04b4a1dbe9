"""What a manifest asks the gate to execute: remote parts (an URL the gate calls) or code.

Code kinds — a `python` target, `command`, `python`, `langgraph` and `openai-agents` runners, stdio
MCP servers and command hooks — are the tenant's programs. A shared service runs them only for a
tenant an operator allowed, only on that tenant's own workers, and only inside the OS sandbox
(docs/operations.md, "Running tenant code"). Remote kinds are URLs, checked against the egress
policy instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from service.core.system.contract import Contract


class Execution(StrEnum):
    REMOTE = "remote"
    CODE = "code"


@dataclass(frozen=True)
class Part:
    """One executable part of a manifest: the field that names it, its kind and how it runs."""

    field: str
    kind: str
    execution: Execution


def parts(target: str, runner: str | None, contract: Contract | None) -> tuple[Part, ...]:
    """Every part a target of kind `target` would call or run, in field order; an `mcp` target also
    names its runner's kind and its tool contract. Handed in, not read from a manifest: the
    manifest's own validation asks (`manifest.parts_of`)."""
    out: list[Part] = []
    if target == "python":
        out.append(Part("manifest.target.entrypoint", "python", Execution.CODE))
    elif target == "http":
        out.append(Part("manifest.target.url", "http", Execution.REMOTE))
    elif target == "mcp":
        assert runner is not None and contract is not None  # the manifest's validator requires it
        if runner == "http":
            out.append(Part("manifest.target.runner.url", "http", Execution.REMOTE))
        elif runner == "command":
            out.append(Part("manifest.target.runner.command", "command", Execution.CODE))
        else:
            out.append(Part("manifest.target.runner.entrypoint", runner, Execution.CODE))
        for name, server in sorted(contract.servers.items()):
            if server.command is not None:
                out.append(Part(f"manifest.tools.servers.{name}.command", "stdio", Execution.CODE))
            else:
                out.append(Part(f"manifest.tools.servers.{name}.url", "mcp", Execution.REMOTE))
        for hook_name in ("reset", "probe", "mutate"):
            hook = getattr(contract.hooks, hook_name)
            if hook is None:
                continue
            field = f"manifest.tools.hooks.{hook_name}"
            if hook.kind == "command":
                out.append(Part(field, "command", Execution.CODE))
            elif hook.kind == "http":
                out.append(Part(f"{field}.url", "http", Execution.REMOTE))
            # An mcp hook runs on its server, which is classified above.
    return tuple(out)
