"""A tenant an operator allowed to run code, whose code wants out: through the real service (API,
PostgreSQL, Redis, shared workers and the tenant's own worker), code that reaches for the signing
key, the database URL, PostgreSQL, Redis or the API, fills memory or outlives its deadline fails;
the assay records a clear target error, and the control plane is unchanged."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import sqlalchemy as sa

from service.settings import Settings
from tests.api.test_tenant_code import allow, client_of, tenant_worker  # noqa: F401 - fixture
from tests.support.keys import KeyBook
from tests.support.service import WorkerProcess, example, row_counts, wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TENANT = "escapers"
AGENT = "tests.adversarial.agents.escape:agent"


def gate_files(settings: Settings) -> list[Path]:
    folders = [settings.keys_dir, settings.injector_keys_dir, settings.injector_public_dir]
    files = [p for d in folders if d is not None for p in sorted(Path(d).rglob("*")) if p.is_file()]
    assert settings.secrets_key_file is not None
    return [*files, settings.secrets_key_file, settings.data_dir / "nothing-here-either"]


def fingerprint(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def manifest(settings: Settings, api_url: str, mode: str) -> dict[str, Any]:
    api = urlsplit(api_url)
    ports = ["127.0.0.1:5432", "127.0.0.1:6379", f"{api.hostname}:{api.port}"]
    env = {
        "MODE": mode,
        "GATE_PATHS": os.pathsep.join(str(p) for p in gate_files(settings)),
        "GATE_PORTS": ",".join(ports),
    }
    return {**example("typed"), "target": {"kind": "python", "entrypoint": AGENT, "env": env}}


@pytest.fixture
def escapers(
    settings: Settings,
    api_url: str,
    keys: KeyBook,
    tenant_worker: Callable[[str], WorkerProcess],  # noqa: F811
) -> Iterator[httpx.Client]:
    with client_of(api_url, keys, TENANT) as client:  # its key makes the tenant
        allow(settings, TENANT)
        tenant_worker(TENANT)
        yield client


def assay(
    client: httpx.Client, data: dict[str, Any], stop: dict[str, int] | None = None
) -> dict[str, Any]:
    plan: dict[str, Any] = {"trials": 2, "seed": 5, "modes": ["timeout_before_send"]}
    if stop:
        plan["stop"] = stop
    body = {
        "system": f"escape-{uuid.uuid4().hex[:8]}",
        "version": "v1",
        "source_revision": "abc123",
        "manifest": data,
        "plan": plan,
    }
    submitted = client.post("/v1/candidates", json=body)
    assert submitted.status_code == 202, submitted.text
    return wait_decided(client, submitted.json()["id"], timeout=240)


def control_rows(engine: sa.Engine) -> dict[str, int]:
    """What an escaped agent would change first: keys, tenants, secrets, people, sessions."""
    control = ("api_key", "tenant", "tenant_secret", "person", "browser_session")
    return {k: v for k, v in row_counts(engine).items() if k in control}


def target_errors(done: dict[str, Any]) -> str:
    return " ".join(r["message"] for r in done["reasons"] if r["code"] == "target_errors")


def test_code_that_reaches_for_keys_credentials_and_the_control_plane_reaches_nothing(
    escapers: httpx.Client,
    settings: Settings,
    api_url: str,
    engine: sa.Engine,
    client: httpx.Client,
) -> None:
    files = gate_files(settings)
    before, rows = fingerprint(files), control_rows(engine)
    done = assay(escapers, manifest(settings, api_url, "probe"))
    assert done["status"] == "done" and done["decision"] != "allow", done
    assert "escape reached nothing" in target_errors(done), done["reasons"]
    # The control plane is unchanged and still answers.
    assert fingerprint(files) == before
    assert control_rows(engine) == rows
    assert client.get("/healthz").status_code == 200


def test_code_that_fills_memory_is_stopped_and_recorded(
    escapers: httpx.Client, settings: Settings, api_url: str
) -> None:
    done = assay(escapers, manifest(settings, api_url, "memory"))
    assert done["status"] == "done" and done["decision"] != "allow", done
    assert "escape stopped by MemoryError" in target_errors(done), done["reasons"]


def test_code_that_outlives_its_deadline_is_a_timeout(
    escapers: httpx.Client, settings: Settings, api_url: str
) -> None:
    # One run past its deadline shows it; the assay stops there instead of waiting out the
    # deadline of every run (each a 10 s wait).
    done = assay(escapers, manifest(settings, api_url, "hang"), {"max_target_errors": 0})
    assert done["status"] in ("done", "stopped") and done["decision"] != "allow", done
    assert "TargetTimeout" in target_errors(done) or "TargetTimeout" in str(done), done["reasons"]
