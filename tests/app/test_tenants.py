"""The warning a worker logs at its start when loopback ports are every tenant's alike while a
tenant may run code (B6): what turns it on and what it tells the operator. That each worker logs
it once, through the real service, is in tests/adversarial/test_kind_attacks.py (on) and
tests/adversarial/test_loopback_tenants.py (per-tenant ports: off)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.app.tenants import shared_loopback
from service.settings import Settings

SERVER = {"database_url": "postgresql+psycopg://gate@db/gate", "broker_url": "redis://redis:6379/0"}


@pytest.mark.parametrize(
    ("allowance", "reach"),
    [("1", "every loopback port"), ("9000-9100,9443", "loopback ports 9000-9100,9443")],
)
def test_a_deployment_wide_loopback_allowance_while_tenants_run_code_names_them_and_the_fix(
    tmp_path: Path, allowance: str, reach: str
) -> None:
    settings = Settings(data_dir=tmp_path, egress_allow_loopback=allowance, **SERVER)
    said = shared_loopback(settings, ["acme", "globex"])
    assert said is not None
    assert f"egress reaches {reach} for every tenant alike" in said
    assert "(acme, globex)" in said and "ASSAYGATE_EGRESS_LOOPBACK_TENANTS" in said


def test_an_embedded_deployment_allows_loopback_by_default_and_is_warned_too(
    tmp_path: Path,
) -> None:
    said = shared_loopback(Settings(data_dir=tmp_path), ["acme"])
    assert said is not None and "every loopback port" in said


def test_many_tenants_are_counted_rather_than_all_named(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, egress_allow_loopback="1", **SERVER)
    said = shared_loopback(settings, [f"t{n}" for n in range(8)])
    assert said is not None and "(t0, t1, t2, t3, t4 and 3 more)" in said


@pytest.mark.parametrize(
    "setting",
    [
        {"egress_allow_loopback": "0"},
        {},  # a deployment with servers refuses loopback until the operator allows it
        {"egress_loopback_tenants": "acme=9000;globex=9001"},
    ],
)
def test_no_warning_where_no_tenant_shares_a_loopback_port(
    tmp_path: Path, setting: dict[str, str]
) -> None:
    settings = Settings(data_dir=tmp_path, **SERVER, **setting)
    assert shared_loopback(settings, ["acme", "globex"]) is None


def test_no_warning_while_no_tenant_may_run_code(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, egress_allow_loopback="1", **SERVER)
    assert shared_loopback(settings, []) is None
