"""Which runner runs a manifest's agent: one per slot (service.mcp.slot builds them)."""

from __future__ import annotations

from service.core.system.manifest import Runner
from service.mcp.lines import LinesRunner
from service.mcp.runners import AgentRunner, CommandRunner, HttpRunner, PythonRunner, address_of
from service.net.egress import EgressPolicy
from service.sandbox import Confinement


def make_runner(
    spec: Runner,
    confinement: Confinement | None = None,
    mcp_url: str | None = None,
    egress: EgressPolicy | None = None,
    slot: int | None = None,
) -> AgentRunner:
    """The runner for `spec`; with `confinement`, its processes run in the sandbox, and a python
    host may reach `mcp_url`'s address (the engine's proxy; each run's URL is on that port).
    `egress`: the policy an http runner's URL is checked against at every connection. `slot`:
    the world's copy this runner's runs are in (one runner per slot, so a framework's graph or
    agent is built once per slot and a warm command process serves one slot)."""
    if spec.kind == "command":
        assert spec.command is not None
        if spec.protocol == "lines":
            return LinesRunner(spec.command, confinement, slot)
        return CommandRunner(spec.command, confinement, slot)
    if spec.kind == "http":
        assert spec.url is not None
        return HttpRunner(spec.url, egress)
    assert spec.entrypoint is not None
    reach = [address_of(mcp_url)] if mcp_url else []
    framework = spec.kind if spec.kind in ("langgraph", "openai-agents") else None
    return PythonRunner(spec.entrypoint, framework, confinement, reach)
