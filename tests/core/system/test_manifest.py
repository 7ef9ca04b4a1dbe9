"""Manifests: strict validation and per-component RFC 8785 hashes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from service.core.decision.gate import Decision, FaultEvidence, decide
from service.core.errors import ManifestInvalid
from service.core.system.manifest import COMPONENTS, parse_manifest, parse_manifest_json
from service.core.system.values import SERVICE_FLOORS
from tests.core.conftest import ASSETS, example_dict

ROOT = Path(__file__).resolve().parents[3]


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


# ------------------------------------------------------------ secrets and declared variables


def _warehouse(**runner: object) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (ROOT / "examples" / "mcp-warehouse" / "manifest.careful.json").read_text()
    )
    if runner:
        data["target"]["runner"] = runner
    return data


def _with_target(data: dict[str, Any], **fields: object) -> dict[str, Any]:
    return {**data, "target": {**data["target"], **fields}}


PYTHON_TARGET = {"kind": "python", "entrypoint": "agent:run"}


def test_a_code_target_names_its_secrets_and_declares_variables() -> None:
    data = {**example_dict("typed"), "target": PYTHON_TARGET}
    plain = parse_manifest(data)
    asked = parse_manifest(
        _with_target(data, secrets=["OPENAI_API_KEY"], env={"MODEL": "gpt-x", "MODE": "fast"})
    )
    assert asked.target.secrets == ("OPENAI_API_KEY",)
    assert asked.target.env == {"MODEL": "gpt-x", "MODE": "fast"}
    # Names are configuration: asking for a secret changes the target's hash, and only its.
    changed = {k for k, v in asked.component_hashes().items() if plain.component_hashes()[k] != v}
    assert changed == {"target"}


def test_a_manifest_without_secrets_or_variables_keeps_its_earlier_digest() -> None:
    data = {**example_dict("typed"), "target": PYTHON_TARGET}
    empty = _with_target(data, secrets=[], env={})
    assert parse_manifest(empty).digest() == parse_manifest(data).digest()


def test_an_mcp_target_whose_runner_is_code_may_ask_for_secrets() -> None:
    assert parse_manifest(_with_target(_warehouse(), secrets=["OPENAI_API_KEY"])).target.secrets


def test_an_mcp_target_with_a_remote_runner_and_a_stdio_server_may_ask_for_secrets() -> None:
    data = _warehouse(kind="http", url="http://127.0.0.1:9/agent")
    data["tools"]["servers"]["shop"] = {"command": ["python", "shop.py"]}
    assert parse_manifest(_with_target(data, secrets=["SHOP_TOKEN"])).target.secrets


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({**example_dict("typed"), "target": {"kind": "reference", "secrets": ["K"]}}, "secrets"),
        (
            {
                **example_dict("typed"),
                "target": {"kind": "http", "url": "http://a/", "secrets": ["K"]},
            },
            "secrets",
        ),
        (_with_target(_warehouse(kind="http", url="http://a/"), secrets=["K"]), "secrets"),
        (_with_target(_warehouse(kind="http", url="http://a/"), env={"MODE": "x"}), "env"),
    ],
    ids=["reference", "http", "remote mcp secrets", "remote mcp env"],
)
def test_secrets_or_variables_on_a_target_that_runs_no_code_are_refused_naming_the_field(
    data: dict[str, Any], field: str
) -> None:
    with pytest.raises(ManifestInvalid) as refused:
        parse_manifest(data)
    assert refused.value.field == f"target.{field}"
    assert "run code" in refused.value.message


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({"secrets": ["lower"]}, "target.secrets.0"),
        ({"secrets": ["OK", "9BAD"]}, "target.secrets.1"),
        ({"secrets": ["A" * 65]}, "target.secrets.0"),
        ({"secrets": ["TWICE", "TWICE"]}, "target.secrets"),
        ({"secrets": [f"K{i}" for i in range(33)]}, "target.secrets"),
        ({"secrets": ["PATH"]}, "target.secrets"),
        ({"secrets": ["ASSAYGATE_MCP_URL"]}, "target.secrets"),
        ({"env": {"bad-name": "x"}}, "target.env.bad-name.[key]"),
        ({"env": {"BIG": "é" * 2049}}, "target.env"),
        ({"env": {f"V{i}": "x" for i in range(65)}}, "target.env"),
        ({"env": {"HOME": "/"}}, "target.env"),
        ({"secrets": ["BOTH"], "env": {"BOTH": "x"}}, "target.env"),
        ({"env": {"N": 1}}, "target.env.N"),
    ],
)
def test_bad_secret_or_variable_names_and_values_are_refused_naming_the_field(
    target: dict[str, Any], field: str
) -> None:
    data = {**example_dict("typed"), "target": {**PYTHON_TARGET, **target}}
    with pytest.raises(ManifestInvalid) as refused:
        parse_manifest(data)
    assert refused.value.field == field


def test_a_manifest_stored_under_the_old_default_still_reads_and_verifies_as_point() -> None:
    # The store writes every field, so a row from before floors compared the lower bound by
    # default says `"floor_on": "point"`: it keeps that rule and the digest it was stored under
    # (what a worker checks before it runs a stored manifest), while the same manifest
    # submitted today without `floor_on` reads the new default, under another digest.
    stored = json.loads((ASSETS / "stored_manifest_point.json").read_text())
    old = parse_manifest(stored["document"])
    assert old.envelope.floor_on == "point"
    assert old.digest() == stored["digest"]
    envelope = {k: v for k, v in stored["document"]["envelope"].items() if k != "floor_on"}
    today = parse_manifest({**stored["document"], "envelope": envelope})
    assert today.envelope.floor_on == "lower_bound"
    assert today.digest() != stored["digest"]
    # Read as point, six perfect trials allow; read on the lower bound they hold for want of 16.
    six = FaultEvidence("f", 6, 6, dict.fromkeys(("contained", *SERVICE_FLOORS), 6))
    assert decide([six], old.envelope).decision is Decision.ALLOW
    assert decide([six], today.envelope).decision is Decision.HOLD
