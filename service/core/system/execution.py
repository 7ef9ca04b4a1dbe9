"""What a manifest asks the gate to execute: remote parts (an URL the gate calls) or code.

Code kinds — a `python` target, `command`, `python`, `langgraph` and `openai-agents` runners, stdio
MCP servers and command hooks — are the tenant's programs. A shared service runs them only for a
tenant an operator allowed, only on that tenant's own workers, and only inside the OS sandbox
(DESIGN.md §7). Remote kinds are URLs, checked against the egress policy instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from service.core.system.contract import contract_of

if TYPE_CHECKING:  # the manifest's own validation asks `code_parts`
    from service.core.system.manifest import Manifest


class Execution(StrEnum):
    REMOTE = "remote"
    CODE = "code"


@dataclass(frozen=True)
class Part:
    """One executable part of a manifest: the field that names it, its kind and how it runs."""

    field: str
    kind: str
    execution: Execution


def parts(manifest: Manifest) -> tuple[Part, ...]:
    """Every part of the manifest the gate would call or run, in field order."""
    out: list[Part] = []
    target = manifest.target
    if target.kind == "python":
        out.append(Part("manifest.target.entrypoint", "python", Execution.CODE))
    elif target.kind == "http":
        out.append(Part("manifest.target.url", "http", Execution.REMOTE))
    elif target.kind == "mcp":
        runner = target.runner
        assert runner is not None  # the manifest's validator requires it
        if runner.kind == "http":
            out.append(Part("manifest.target.runner.url", "http", Execution.REMOTE))
        elif runner.kind == "command":
            out.append(Part("manifest.target.runner.command", "command", Execution.CODE))
        else:
            out.append(Part("manifest.target.runner.entrypoint", runner.kind, Execution.CODE))
        contract = contract_of(manifest)
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


def code_parts(manifest: Manifest) -> tuple[Part, ...]:
    """The parts that are the tenant's code (empty: the manifest runs nothing of the tenant's)."""
    return tuple(p for p in parts(manifest) if p.execution is Execution.CODE)


def runs_code(manifest: Manifest) -> bool:
    return bool(code_parts(manifest))
