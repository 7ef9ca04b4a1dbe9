"""The egress policy: what a manifest's URLs may reach, at submission and at connection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.net.egress import EgressPolicy, EgressRefused, EgressTransport, system_resolver
from service.settings import Settings
from tests.net.servers import serving

FIELD = "manifest.target.url"


def production(tmp_path: Path, **egress: Any) -> Settings:
    """PostgreSQL and Redis on loopback, the API on 127.0.0.1:8000: a deployment with servers."""
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "database_url": "postgresql+psycopg://gate@127.0.0.1:5432/gate",
        "broker_url": "redis://localhost:6379/0",
        "host": "127.0.0.1",
        "port": 8000,
    }
    return Settings(**{**values, **egress})


def embedded(tmp_path: Path, **egress: Any) -> Settings:
    return Settings(**{"data_dir": tmp_path, "host": "127.0.0.1", "port": 8000, **egress})


def refusal(policy: EgressPolicy, url: str) -> str | None:
    try:
        policy.check_url(url, FIELD)
    except EgressRefused as exc:
        assert exc.field == FIELD
        return exc.message
    return None


METADATA = [
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.170.2/v2/credentials",
    "http://[fe80::1]/",
    "http://[fe80::a9fe:a9fe%25eth0]/",
    "http://100.100.100.200/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.GOOGLE.INTERNAL./",
    "http://[::ffff:169.254.169.254]/",
    "http://2852039166/",
    "http://0xa9.0xfe.0xa9.0xfe/",
]


@pytest.mark.parametrize("url", METADATA)
def test_metadata_and_link_local_addresses_are_never_targets_even_on_a_users_machine(
    url: str,
) -> None:
    why = refusal(EgressPolicy.local(), url)
    assert why is not None and ("metadata" in why or "link-local" in why)


@pytest.mark.parametrize(
    "url",
    [
        "http://0.0.0.0:9000/",
        "http://0/",
        "http://[::]:9000/",
        "http://224.0.0.1/",
        "http://[ff02::1]/",
        "http://255.255.255.255/",
    ],
)
def test_unspecified_multicast_and_broadcast_addresses_are_never_targets(url: str) -> None:
    assert refusal(EgressPolicy.local(), url) is not None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1/assays",
        "http://127.0.0.2:8000/",
        "http://[::1]:8000/",
        "http://[::ffff:127.0.0.1]:8000/",
        "http://2130706433:8000/",
        "http://0x7f.1:8000/",
        "http://localhost:5432/",
        "http://127.0.0.1:5432/",
        "http://127.0.0.1:6379/",
        "https://127.1:6379/",
    ],
)
def test_the_gates_own_ports_on_loopback_are_refused_where_loopback_is_allowed(
    tmp_path: Path, url: str
) -> None:
    settings = production(tmp_path, egress_allow_loopback=True)
    why = refusal(EgressPolicy.from_settings(settings), url)
    assert why is not None and "the gate's own" in why


def test_an_embedded_gate_refuses_its_own_api_port_but_allows_other_loopback_ports(
    tmp_path: Path,
) -> None:
    policy = EgressPolicy.from_settings(embedded(tmp_path))
    assert "the gate's own API" in (refusal(policy, "http://localhost:8000/") or "")
    assert refusal(policy, "http://127.0.0.1:9000/agent") is None
    assert refusal(policy, "http://192.168.1.20:9000/") is None


LOOPBACK = [
    "http://127.0.0.1:9000/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::1]:9000/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://localhost:9000/",
]
PRIVATE = [
    "http://10.0.0.5/",
    "http://172.16.0.1/",
    "http://192.168.1.1:8080/",
    "http://100.64.0.1/",
    "http://[fc00::1]/",
    "http://[::ffff:10.0.0.1]/",
    "http://167772161/",
]


@pytest.mark.parametrize("url", LOOPBACK)
def test_a_production_gate_refuses_loopback_unless_the_operator_allows_it(
    tmp_path: Path, url: str
) -> None:
    why = refusal(EgressPolicy.from_settings(production(tmp_path)), url)
    assert why is not None and "loopback" in why
    allowed = EgressPolicy.from_settings(production(tmp_path, egress_allow_loopback=True))
    assert refusal(allowed, url) is None


@pytest.mark.parametrize("url", PRIVATE)
def test_a_production_gate_refuses_private_addresses_unless_the_operator_allows_them(
    tmp_path: Path, url: str
) -> None:
    why = refusal(EgressPolicy.from_settings(production(tmp_path)), url)
    assert why is not None and "private" in why
    allowed = EgressPolicy.from_settings(production(tmp_path, egress_allow_private=True))
    assert refusal(allowed, url) is None


def test_the_allowlist_admits_its_networks_and_hosts_but_never_metadata(tmp_path: Path) -> None:
    settings = production(tmp_path, egress_allowlist="10.1.0.0/16, localhost, 169.254.0.0/16")
    policy = EgressPolicy.from_settings(settings)
    assert refusal(policy, "http://10.1.2.3/") is None
    assert refusal(policy, "http://10.2.0.1/") is not None
    assert refusal(policy, "http://localhost:9000/") is None
    assert refusal(policy, "http://127.0.0.1:9000/") is not None
    assert refusal(policy, "http://localhost:8000/") is not None
    assert refusal(policy, "http://169.254.169.254/") is not None


def test_public_addresses_are_targets(tmp_path: Path) -> None:
    policy = EgressPolicy.from_settings(production(tmp_path))
    assert refusal(policy, "https://93.184.216.34/agent") is None
    assert refusal(policy, "http://[2606:2800:220:1:248:1893:25c8:1946]:8000/") is None


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "file:///etc/passwd", "gopher://127.0.0.1:6379/_", "http:///x"]
)
def test_only_http_and_https_urls_with_a_host_are_accepted(url: str) -> None:
    assert refusal(EgressPolicy.local(), url) is not None


def test_resolve_returns_the_checked_address_and_refuses_a_name_that_resolves_to_a_forbidden_one(
    tmp_path: Path,
) -> None:
    assert EgressPolicy.local().resolve("localhost", 9000) in ("127.0.0.1", "::1")
    assert EgressPolicy.local().resolve("2130706433", 9000) == "127.0.0.1"
    with pytest.raises(EgressRefused, match="localhost resolves to"):
        EgressPolicy.from_settings(production(tmp_path)).resolve("localhost", 9000)


class Rebinding:
    """A resolver that answers a public address first and loopback afterwards: the DNS
    rebinding attack on a check made only at submission."""

    def __init__(self, public_answers: int = 1) -> None:
        self.calls = 0
        self.public_answers = public_answers

    def __call__(self, host: str, port: int) -> list[str]:
        if host != "rebind.example":
            return system_resolver(host, port)
        self.calls += 1
        return ["93.184.216.34"] if self.calls <= self.public_answers else ["127.0.0.1"]


@pytest.fixture
def guarded_port(tmp_path: Path) -> Iterator[tuple[EgressPolicy, Any]]:
    """A loopback service that stands for the control plane: the policy names its port as the
    gate's API; the policy allows loopback otherwise (so a redirector on loopback is reachable)."""
    with serving() as forbidden:
        settings = production(tmp_path, port=forbidden.port, egress_allow_loopback=True)
        yield EgressPolicy.from_settings(settings, Rebinding()), forbidden


def test_a_name_that_rebinds_after_submission_is_refused_at_connection(tmp_path: Path) -> None:
    with serving() as target:
        resolver = Rebinding()
        policy = EgressPolicy.from_settings(production(tmp_path), resolver)
        url = f"http://rebind.example:{target.port}/"
        policy.check_url(url, FIELD)  # public at submission
        with (
            httpx.Client(transport=EgressTransport(policy)) as client,
            pytest.raises(EgressRefused, match=r"rebind\.example resolves to 127\.0\.0\.1"),
        ):
            client.post(url, json={})
    assert target.hits == []


def test_a_redirect_hop_to_a_forbidden_address_is_refused_and_reaches_nothing(
    guarded_port: tuple[EgressPolicy, Any],
) -> None:
    policy, forbidden = guarded_port
    with serving(redirect_to=f"http://localhost:{forbidden.port}/v1/assays") as redirector:
        policy.check_url(redirector.url, FIELD)
        transport = EgressTransport(policy)
        with (
            httpx.Client(transport=transport, follow_redirects=True) as client,
            pytest.raises(EgressRefused, match="the gate's own API"),
        ):
            client.get(redirector.url)
    assert redirector.hits == ["GET /"]
    assert forbidden.hits == []


# ------------------------------------------------------------------ loopback ports per tenant


def test_loopback_ports_per_tenant_open_each_tenants_own_ports_only(tmp_path: Path) -> None:
    settings = production(tmp_path, egress_loopback_tenants="acme=9000-9010;globex=9443")
    acme = EgressPolicy.from_settings(settings, tenant="acme")
    acme.check_url("http://127.0.0.1:9005/", "url")
    for url in ("http://127.0.0.1:9443/", "http://127.0.0.1:9011/"):
        with pytest.raises(EgressRefused):
            acme.check_url(url, "url")
    # A tenant the setting does not name, and no tenant at all, reach no loopback port.
    for tenant in ("initech", None):
        with pytest.raises(EgressRefused):
            EgressPolicy.from_settings(settings, tenant=tenant).check_url(
                "http://127.0.0.1:9005/", "url"
            )


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("acme=9000-9010;globex=9010", "share loopback ports"),
        ("acme=9000;acme=9001", "named twice"),
        ("acme", "is not TENANT=PORTS"),
        ("acme=nine", "is not a port"),
    ],
)
def test_loopback_ports_per_tenant_that_overlap_or_do_not_parse_stop_the_settings(
    tmp_path: Path, value: str, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        production(tmp_path, egress_loopback_tenants=value)


def test_loopback_ports_per_tenant_and_deployment_wide_are_not_set_together(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="both set"):
        production(tmp_path, egress_loopback_tenants="acme=9000", egress_allow_loopback="9000")
    production(tmp_path, egress_loopback_tenants="acme=9000", egress_allow_loopback="0")
