"""The gate's own addresses, from settings every process shares, and the loopback allowance by
port: what the worker's egress policy refuses whatever an operator allows."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.net import egress as egress_module
from service.net.egress import EgressPolicy, control_plane
from tests.net.test_egress import embedded, production, refusal


def names(host: str, port: int) -> list[str]:
    """A resolver for the deployment's names: `api` and `gate.example.com` are this host."""
    table = {
        "api": ["127.0.0.1"],
        "localhost": ["127.0.0.1", "::1"],
        "gate.example.com": ["10.1.2.3"],
        "db": ["10.1.2.4"],
    }
    return table.get(host, ["203.0.113.9"])


def test_the_apis_advertised_url_and_a_bare_host_port_join_the_control_plane(
    tmp_path: Path,
) -> None:
    settings = production(
        tmp_path,
        port=8080,
        egress_allow_loopback="1",
        egress_allow_private=True,
        control_plane="http://api:8000, https://gate.example.com,metrics:9464",
    )
    policy = EgressPolicy.from_settings(settings, names)
    for url in ("http://127.0.0.1:8000/healthz", "http://localhost:8000/", "https://10.1.2.3/"):
        assert "the gate's own control plane" in (refusal(policy, url) or ""), url
    assert "the gate's own API" in (refusal(policy, "http://127.1:8080/") or "")
    assert refusal(policy, "http://10.1.2.3:8443/") is None


def test_the_database_and_broker_hosts_come_from_their_urls(tmp_path: Path) -> None:
    settings = production(
        tmp_path,
        database_url="postgresql+psycopg://gate:pw@db/gate",
        broker_url="redis://db:6380/0",
        egress_allow_private=True,
    )
    endpoints = {e.name: e for e in control_plane(settings, names)}
    assert endpoints["database"].port == 5432 and endpoints["broker"].port == 6380
    policy = EgressPolicy.from_settings(settings, names)
    assert "the gate's own database" in (refusal(policy, "http://10.1.2.4:5432/") or "")
    assert "the gate's own broker" in (refusal(policy, "http://db:6380/") or "")


def test_a_loopback_allowance_by_range_allows_those_ports_only(tmp_path: Path) -> None:
    policy = EgressPolicy.from_settings(
        production(tmp_path, egress_allow_loopback="9000-9100,9443")
    )
    assert refusal(policy, "http://127.0.0.1:9050/") is None
    assert refusal(policy, "http://localhost:9443/") is None
    assert "outside ASSAYGATE_EGRESS_ALLOW_LOOPBACK's ranges" in (
        refusal(policy, "http://127.0.0.1:9101/") or ""
    )


def test_the_deprecated_loopback_switch_warns_and_still_refuses_the_gates_own_addresses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Said once a process: as if this process had not said it yet.
    monkeypatch.setitem(egress_module._said, "loopback", False)
    with caplog.at_level(logging.WARNING, "assaygate.egress"):
        policy = EgressPolicy.from_settings(production(tmp_path, egress_allow_loopback="true"))
    assert "deprecated" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, "assaygate.egress"):
        EgressPolicy.from_settings(production(tmp_path, egress_allow_loopback="true"))
    assert "deprecated" not in caplog.text  # not again for every policy built
    assert refusal(policy, "http://127.0.0.1:9050/") is None
    assert "the gate's own API" in (refusal(policy, "http://127.0.0.1:8000/") or "")
    why = refusal(policy, "http://127.77.0.1:41000/t/token/mcp")
    assert "the gate's own relays and proxies" in (why or "")


def test_an_allowlist_naming_all_of_loopback_still_never_reaches_the_gates_relays(
    tmp_path: Path,
) -> None:
    policy = EgressPolicy.from_settings(production(tmp_path, egress_allowlist="127.0.0.0/8"))
    assert refusal(policy, "http://127.0.0.1:9050/") is None
    assert "relays and proxies" in (refusal(policy, "http://2135752705:41000/") or "")


def test_an_embedded_gate_still_allows_loopback_without_naming_ports(tmp_path: Path) -> None:
    policy = EgressPolicy.from_settings(embedded(tmp_path))
    assert refusal(policy, "http://127.0.0.1:9050/") is None
    assert refusal(policy, "http://127.77.0.1:9050/") is not None


@pytest.mark.parametrize("value", ["9100-9000", "abc", "0", "70000", "9000-", "1-2-3"])
def test_a_loopback_allowance_that_is_not_ports_is_refused_at_start(
    tmp_path: Path, value: str
) -> None:
    if value == "0":
        assert not production(tmp_path, egress_allow_loopback=value).egress_loopback
        return
    with pytest.raises(ValidationError, match="egress_allow_loopback"):
        production(tmp_path, egress_allow_loopback=value)


@pytest.mark.parametrize("value", ["api", "http://", "[::1", "api:notaport"])
def test_a_control_plane_item_without_host_and_port_is_refused_at_start(
    tmp_path: Path, value: str
) -> None:
    with pytest.raises(ValidationError, match="control_plane"):
        production(tmp_path, control_plane=value)


@pytest.mark.parametrize(
    "value", ["https://assaygate.change-me.invalid", "api:8000,gate.invalid:443"]
)
def test_a_control_plane_placeholder_is_refused_at_start(tmp_path: Path, value: str) -> None:
    # RFC 6761's `.invalid` never resolves: deploy/k8s ships it for the operator to replace.
    with pytest.raises(
        ValidationError, match=r"is a placeholder \(a \.invalid host never resolves\)"
    ):
        production(tmp_path, control_plane=value)
    production(tmp_path, control_plane="api:8000,https://gate.example.com")
