"""Manifests: strict validation and per-component RFC 8785 hashes."""

from __future__ import annotations

import hashlib
import json

import pytest
import rfc8785

from service.core.errors import ManifestInvalid
from service.core.manifest import COMPONENTS, parse_manifest, parse_manifest_json
from tests.core.conftest import example_dict


def _reordered(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _reordered(obj[k]) for k in reversed(list(obj))}
    return obj


def test_equal_manifests_in_any_key_order_hash_equally() -> None:
    data = example_dict("typed")
    a = parse_manifest(data)
    b = parse_manifest_json(json.dumps(_reordered(data)))
    assert a.component_hashes() == b.component_hashes()
    assert a.digest() == b.digest()


def test_each_component_hash_is_sha256_over_its_canonical_json() -> None:
    data = example_dict("typed")
    m = parse_manifest(data)
    assert m.component_hashes()["tools"] == hashlib.sha256(rfc8785.dumps(data["tools"])).hexdigest()
    # `invariants` (mcp targets) is hashed only when present, so earlier digests hold.
    assert set(m.component_hashes()) == set(COMPONENTS) - {"invariants"}
    assert m.digest() == hashlib.sha256(rfc8785.dumps(m.component_hashes())).hexdigest()


def test_changing_the_retry_component_changes_only_its_hash() -> None:
    data = example_dict("typed")
    before = parse_manifest(data).component_hashes()
    data["retry"] = {**data["retry"], "max_attempts": 7}  # type: ignore[dict-item]
    after = parse_manifest(data).component_hashes()
    assert [k for k in before if before[k] != after[k]] == ["retry"]


def test_metadata_does_not_change_the_digest() -> None:
    data = example_dict("typed")
    a = parse_manifest(data).digest()
    data["version"] = "9.9.9"
    assert parse_manifest(data).digest() == a


@pytest.mark.parametrize(
    ("mutate", "field", "rule"),
    [
        (lambda d: d.update(surprise=1), "surprise", "unknown key"),
        (lambda d: d["controls"].update(telepathy=True), "controls.telepathy", "unknown control"),
        (lambda d: d["controls"].update(idempotency="yes"), "controls.idempotency", "boolean"),
        (lambda d: d["retry"].update(max_attempts=0), "retry.max_attempts", "greater than"),
        (lambda d: d.pop("tools"), "tools", "required"),
        (lambda d: d["target"].update(kind="python"), "target", "entrypoint"),
    ],
)
def test_invalid_manifests_name_the_field_and_the_rule(mutate, field: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(json.dumps(example_dict("typed")))
    mutate(data)
    with pytest.raises(ManifestInvalid) as err:
        parse_manifest(data)
    assert err.value.field == field
    assert rule in err.value.message.lower()


def test_malformed_json_is_a_manifest_error() -> None:
    with pytest.raises(ManifestInvalid, match="malformed JSON"):
        parse_manifest_json("{not json")


def test_a_manifest_nested_too_deep_is_refused_naming_the_component() -> None:
    data = example_dict("typed")
    deep: dict[str, object] = {}
    node = deep
    for _ in range(40):
        node["x"] = {}
        node = node["x"]  # type: ignore[assignment]
    data["tools"] = deep
    with pytest.raises(ManifestInvalid) as err:
        parse_manifest(data)
    assert err.value.field == "tools" and "deeper than" in err.value.message


def test_a_manifest_with_too_many_values_is_refused() -> None:
    data = example_dict("typed")
    data["policy"] = {f"k{i}": i for i in range(25_000)}
    with pytest.raises(ManifestInvalid) as err:
        parse_manifest(data)
    assert err.value.field == "policy"
