"""A submission is read once: the manifest, and every piece admission checks, typed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.core.errors import ArtifactInvalid, ManifestInvalid
from service.core.system.execution import Execution
from service.core.system.manifest import contract_of, invariants_of, parse_manifest, parts_of
from service.core.system.typed import read, typed

ROOT = Path(__file__).resolve().parents[3]
DIGEST = "sha256:" + "ab" * 32


def warehouse() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (ROOT / "examples" / "mcp-warehouse" / "manifest.careful.json").read_text()
    )
    return data


def copperfin() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "examples" / "copperfin-typed.json").read_text())
    return data


def test_an_mcp_manifest_is_read_into_its_contract_parts_urls_builds_and_code() -> None:
    reading = read(warehouse(), DIGEST)
    assert reading.mcp and reading.contract is not None and reading.invariants is not None
    assert sorted(reading.contract.servers) == ["admin", "shop"]
    assert reading.urls == (
        ("manifest.tools.servers.admin.url", "http://127.0.0.1:8766/mcp"),
        ("manifest.tools.servers.shop.url", "http://127.0.0.1:8765/mcp"),
    )
    assert reading.builds == {
        "tools.servers.admin": "warehouse-admin@1.0.0",
        "tools.servers.shop": "warehouse-shop@1.0.0",
    }
    assert [p.field for p in reading.code_parts] == ["manifest.target.runner.command"]
    assert reading.runs_code and reading.code == "ab" * 32
    assert all(p.execution is Execution.REMOTE for p in reading.parts[1:])


def test_a_reference_manifest_has_no_contract_no_parts_and_no_code() -> None:
    reading = read(copperfin())
    assert reading.contract is None and reading.invariants is None
    assert reading.parts == () and reading.urls == () and not reading.runs_code
    assert reading.code is None and reading.secrets == ()


def test_each_piece_is_derived_once_per_manifest() -> None:
    manifest = parse_manifest(warehouse())
    assert contract_of(manifest) is contract_of(manifest)
    assert invariants_of(manifest) is invariants_of(manifest)
    assert parts_of(manifest) is parts_of(manifest)
    reading = typed(manifest)
    assert reading.contract is contract_of(manifest) and reading.parts is parts_of(manifest)


def test_a_copy_with_other_fields_is_read_again_not_from_the_original() -> None:
    manifest = parse_manifest(warehouse())
    contract_of(manifest)
    changed = json.loads(json.dumps(manifest.tools))
    changed["servers"]["shop"]["url"] = "http://127.0.0.1:9999/mcp"
    copy = manifest.model_copy(update={"tools": changed})
    assert contract_of(copy).servers["shop"].url == "http://127.0.0.1:9999/mcp"
    assert contract_of(manifest).servers["shop"].url == "http://127.0.0.1:8765/mcp"


@pytest.mark.parametrize("code", ["ab" * 32, "sha256:" + "AB" * 32, "md5:" + "ab" * 16, 7])
def test_a_code_artifact_named_by_anything_but_a_digest_is_refused_naming_code(
    code: object,
) -> None:
    with pytest.raises(ArtifactInvalid) as refused:
        read(copperfin(), code)
    assert refused.value.field == "code"


def test_the_manifest_is_validated_whole_before_anything_is_derived() -> None:
    data = warehouse()
    data["target"]["runner"]["kind"] = "teleport"
    with pytest.raises(ManifestInvalid) as refused:
        read(data, DIGEST)
    assert str(refused.value.field).startswith("target.runner")
