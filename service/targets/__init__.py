"""Target adapters that do I/O: load the configured system under test for an assay.

`load_target(manifest)` returns `None` for the built-in reference workflow (the core builds it)
and an adapter for a `python` or `http` target. The CLI and the worker both call it, so an assay
exercises the same target however it is run. Both adapters hold resources (a tool server; for a
python target, the child process serving the callable): release them with `close_target`.
"""

from __future__ import annotations

from service.core.system.manifest import TARGET_ENDPOINT, Manifest
from service.core.trial.engine import TrialEngine
from service.core.trial.target import Target
from service.net.egress import EgressPolicy
from service.sandbox import Confinement
from service.targets.http import DEFAULT_TIMEOUT_S, HttpTarget
from service.targets.python import PythonTarget, load_python_target

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "HttpTarget",
    "PythonTarget",
    "Target",
    "close_target",
    "load_python_target",
    "load_target",
]


def load_target(
    manifest: Manifest,
    http_timeout_s: float = DEFAULT_TIMEOUT_S,
    confinement: Confinement | None = None,
    egress: EgressPolicy | None = None,
    tenant: str | None = None,
    slots: int = 1,
) -> Target | TrialEngine | None:
    """With `confinement`, every process of the tenant's code runs in the sandbox
    (`service.sandbox.bwrap`); `None` (the local CLI) runs it as the user's own processes.
    `egress`: the policy every connection to a URL of the manifest is checked against (the
    worker's, or the local CLI's). `tenant`: whose assay it is (an mcp target's sandbox lock).
    `slots`: trials at once, for an mcp target whose world offers slots (others run serially)."""
    spec = manifest.target
    if spec.kind == "mcp":
        from service.mcp.engine import McpEngine

        return McpEngine(
            manifest, confinement=confinement, egress=egress, tenant=tenant, slots=slots
        )
    if spec.kind == "python":
        assert spec.entrypoint is not None  # the manifest validator requires it
        return load_python_target(
            spec.entrypoint, timeout_s=http_timeout_s, confinement=confinement
        )
    if spec.kind == "http":
        assert spec.url is not None
        return HttpTarget(
            spec.url, timeout_s=http_timeout_s, egress=egress, endpoint=TARGET_ENDPOINT
        )
    return None


def close_target(target: Target | TrialEngine | None) -> None:
    """Release what an adapter holds (its tool server and, for a python target, its child
    process; for an mcp target, its proxy, upstream connections and runner); a no-op for the
    reference target."""
    if isinstance(target, HttpTarget):
        target.close()
    close = getattr(target, "close", None)
    if close is not None and not isinstance(target, HttpTarget):
        close()
