"""Checks an mcp manifest needs beyond the core's validation: its invariants are priced within
the budget and compile (service/mcp/cel.py)."""

from __future__ import annotations

from service.core.system.manifest import Manifest, invariants_of
from service.mcp.cel import compile_invariants


def check_mcp_manifest(manifest: Manifest) -> None:
    """Raise `ManifestInvalid` naming the field of the first invariant that does not compile."""
    compile_invariants(invariants_of(manifest))
