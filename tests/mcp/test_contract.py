"""The tool contract and invariants of mcp manifests: strict, hashed, and gate-reopening."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from service.core.errors import ManifestInvalid
from service.core.faults.contract_catalogue import catalogue_for
from service.core.signing.dossier import DEFAULT_TRIGGERS
from service.core.system.contract import Invariants, parse_contract
from service.core.system.manifest import parse_manifest, sha256_canonical
from service.mcp.cel import compile_invariants
from tests.mcp.conftest import EXAMPLE


def example() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLE / "manifest.careful.json").read_text())
    return data


def field_of(data: dict[str, Any]) -> str:
    with pytest.raises(ManifestInvalid) as exc:
        parse_manifest(data)
    return str(exc.value.field)


def test_the_example_contract_parses_and_implies_faults_by_role() -> None:
    m = parse_manifest(example())
    cat = catalogue_for(m)
    ids = {f.id for f in cat.faults}
    assert {
        "ship_order_timeout_after_commit",
        "get_order_subject_swap",
        "check_release_revoked",
        "log_event_dropped_write",
        "restart_after_checkpoint",
        "forked_run",
        "world_mutated",
        "retry_storm",
    } <= ids
    assert cat.version.startswith("mcp-")


def test_an_effect_without_its_subject_argument_names_the_field() -> None:
    data = example()
    del data["tools"]["tools"]["ship_order"]["subject"]
    assert field_of(data) == "tools.tools.ship_order.subject"


def test_a_lookup_through_a_tool_that_is_not_a_read_names_the_field() -> None:
    data = example()
    data["tools"]["tools"]["ship_order"]["lookup"]["tool"] = "issue_credit"
    assert field_of(data) == "tools.tools.ship_order.lookup.tool"


def test_an_unknown_role_and_an_unknown_key_name_their_fields() -> None:
    data = example()
    data["tools"]["tools"]["get_stock"]["role"] = "oracle"
    assert field_of(data) == "tools.tools.get_stock.role"
    data = example()
    data["tools"]["tools"]["get_stock"]["colour"] = "red"
    assert field_of(data) == "tools.tools.get_stock.colour"


def test_a_tool_on_an_undeclared_server_names_the_field() -> None:
    data = example()
    data["tools"]["tools"]["get_stock"]["server"] = "erp"
    assert field_of(data) == "tools.tools.get_stock.server"


def test_an_idempotency_key_on_a_read_names_the_field() -> None:
    data = example()
    data["tools"]["tools"]["get_stock"]["idempotency_key"] = "key"
    assert field_of(data) == "tools.tools.get_stock.idempotency_key"


def test_an_invariant_that_does_not_compile_names_its_expression() -> None:
    inv = Invariants.model_validate({"predicates": [{"name": "x", "expr": "new_effects.all(e, "}]})
    with pytest.raises(ManifestInvalid) as exc:
        compile_invariants(inv)
    assert exc.value.field == "invariants.predicates.0.expr"
    assert "does not compile" in exc.value.message


def test_an_invariant_over_an_unknown_variable_names_its_expression() -> None:
    inv = Invariants.model_validate({"predicates": [{"name": "x", "expr": "ledger.size() > 0"}]})
    with pytest.raises(ManifestInvalid) as exc:
        compile_invariants(inv)
    assert exc.value.field == "invariants.predicates.0.expr"
    assert "ledger" in exc.value.message


def test_a_bad_severity_names_the_field() -> None:
    data = example()
    data["invariants"]["predicates"][0]["severity"] = "warn"
    assert field_of(data) == "invariants.predicates.0.severity"


def test_errors_that_may_commit_are_declared_on_effects_only_and_default_to_false() -> None:
    contract = parse_manifest(example()).tools
    assert parse_contract(contract).tools["ship_order"].errors_may_commit is False
    data = example()
    data["tools"]["tools"]["ship_order"]["errors_may_commit"] = True
    assert parse_contract(data["tools"]).tools["ship_order"].errors_may_commit is True
    data["tools"]["tools"]["log_event"]["errors_may_commit"] = True
    assert field_of(data) == "tools.tools.log_event.errors_may_commit"


def test_altering_existing_effects_is_declared_on_effects_only_and_defaults_to_false() -> None:
    contract = parse_manifest(example()).tools
    assert parse_contract(contract).tools["ship_order"].alters_existing is False
    data = example()
    data["tools"]["tools"]["issue_credit"]["alters_existing"] = True
    assert parse_contract(data["tools"]).tools["issue_credit"].alters_existing is True
    data["tools"]["tools"]["get_order"]["alters_existing"] = True
    assert field_of(data) == "tools.tools.get_order.alters_existing"
    data = example()
    data["tools"]["tools"]["issue_credit"]["alters_existing"] = "sometimes"
    assert field_of(data) == "tools.tools.issue_credit.alters_existing"


def test_a_contract_without_the_new_fields_keeps_its_digest() -> None:
    # Declaring the default is a change of the component (its bytes are hashed), leaving it out
    # is not: every earlier manifest keeps its digest and its catalogue version.
    data = example()
    before = parse_manifest(data).component_hashes()["tools"]
    assert before == sha256_canonical(data["tools"])
    data["tools"]["tools"]["ship_order"]["errors_may_commit"] = False
    assert parse_manifest(data).component_hashes()["tools"] != before


def test_invariants_are_a_hashed_component_and_a_default_trigger() -> None:
    data = example()
    before = parse_manifest(data).component_hashes()
    changed = copy.deepcopy(data)
    changed["invariants"]["predicates"][0]["expr"] = "true"
    after = parse_manifest(changed).component_hashes()
    assert [k for k in before if before[k] != after[k]] == ["invariants"]
    assert "invariants" in DEFAULT_TRIGGERS and "tools" in DEFAULT_TRIGGERS


def test_a_contract_change_is_a_tools_change_and_a_new_catalogue() -> None:
    data = example()
    changed = copy.deepcopy(data)
    changed["tools"]["tools"]["get_stock"]["subject"] = "sku"
    a, b = parse_manifest(data), parse_manifest(changed)
    assert a.component_hashes()["tools"] != b.component_hashes()["tools"]
    assert catalogue_for(a).version != catalogue_for(b).version


def test_invariants_on_a_non_mcp_target_are_refused() -> None:
    data = example()
    data["target"] = {"kind": "reference"}
    assert field_of(data) == "invariants"


def test_parse_contract_alone_reports_the_tools_field() -> None:
    with pytest.raises(ManifestInvalid) as exc:
        parse_contract({"servers": {}, "tools": {}, "hooks": {}})
    assert exc.value.field.startswith("tools.")
