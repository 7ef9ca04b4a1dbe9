"""A submission read once: the manifest and everything admission checks, derived one time.

A candidate's manifest used to be re-derived wherever a check needed a piece of it: its tool
contract for the CEL check, its parts for the code check, its URLs for the egress check, its
builds for the decision. `read` parses the manifest once (`parse_manifest`, which validates it
whole) and carries each piece, typed, together with the artifact the candidate names; the
service's admission (`service.app.admission`) runs every check over this one reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from service.core.system.artifact import parse_digest
from service.core.system.contract import Contract, Invariants
from service.core.system.egress import manifest_urls
from service.core.system.execution import Execution, Part
from service.core.system.manifest import (
    Manifest,
    build_endpoints,
    contract_of,
    invariants_of,
    parse_manifest,
    parts_of,
)


@dataclass(frozen=True)
class TypedManifest:
    """One submission's manifest, read: `parts` is every part the gate would call or run (in
    field order), `urls` every URL it names by field, `builds` every remote endpoint's declared
    build (None: none declared), `secrets` the tenant secrets its code is given by name, and
    `code` the hex SHA-256 of the code artifact the candidate names (None: none). `contract`
    and `invariants`: an mcp target's (None for the other kinds, whose `tools` is free-form)."""

    manifest: Manifest
    contract: Contract | None
    invariants: Invariants | None
    parts: tuple[Part, ...]
    urls: tuple[tuple[str, str], ...]
    builds: Mapping[str, str | None]
    secrets: tuple[str, ...]
    code: str | None

    @property
    def code_parts(self) -> tuple[Part, ...]:
        """The parts that are the tenant's code (empty: nothing of the tenant's runs)."""
        return tuple(p for p in self.parts if p.execution is Execution.CODE)

    @property
    def runs_code(self) -> bool:
        return bool(self.code_parts)

    @property
    def mcp(self) -> bool:
        return self.manifest.target.kind == "mcp"


def typed(manifest: Manifest, code: str | None = None) -> TypedManifest:
    """What a validated manifest means (`code`: the hex digest of its candidate's artifact)."""
    mcp = manifest.target.kind == "mcp"
    return TypedManifest(
        manifest=manifest,
        contract=contract_of(manifest) if mcp else None,
        invariants=invariants_of(manifest) if mcp else None,
        parts=parts_of(manifest),
        urls=manifest_urls(manifest),
        builds=build_endpoints(manifest),
        secrets=tuple(manifest.target.secrets),
        code=code,
    )


def read(data: object, code: object = None) -> TypedManifest:
    """A decoded manifest and the artifact digest a submission names (`sha256:<hex>`, or None),
    read once. Raises `ManifestInvalid` naming the manifest's first bad field, and
    `ArtifactInvalid` naming `code` for a malformed digest."""
    manifest = parse_manifest(data)
    return typed(manifest, parse_digest(code, "code") if code is not None else None)
