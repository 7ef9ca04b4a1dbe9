"""docker-compose.yml keeps the signing key off tenant code: the services that run a tenant's
code mount no dossier-signing key and name none; the shared worker, which runs no tenant code,
holds it and seals every dossier."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.service import ROOT

COMPOSE = ROOT / "docker-compose.yml"


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return found


def mounts(service: dict[str, Any]) -> list[str]:
    return [str(v).split(":")[0] for v in service.get("volumes", [])]


def test_the_tenant_worker_mounts_no_signing_key_and_runs_only_its_tenants_queue() -> None:
    tenant_workers = {
        k: s for k, s in services().items() if "ASSAYGATE_WORKER_TENANT" in s.get("environment", {})
    }
    assert set(tenant_workers) == {"tenant-worker"}
    for service in tenant_workers.values():
        assert "dossier-keys" not in mounts(service)
        assert not service["environment"]["ASSAYGATE_KEYS_DIR"].startswith("/keys/")
        assert "privileged" not in service
        assert set(service["cap_add"]) >= {"SYS_ADMIN", "NET_ADMIN"} and service["cap_drop"] == [
            "ALL"
        ]


def test_the_shared_worker_and_the_api_hold_the_signing_key() -> None:
    found = services()
    assert "dossier-keys" in mounts(found["worker"]) and "dossier-keys" in mounts(found["api"])
