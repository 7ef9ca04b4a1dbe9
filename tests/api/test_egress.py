"""A submitter cannot point the gate at its own control plane or a metadata service: a served API
with production settings refuses such URLs at submission, naming the field and the rule, and
stores nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from service.asgi import create_app
from service.settings import Settings
from tests.mcp.conftest import EXAMPLE
from tests.support.keys import KeyBook
from tests.support.service import ApiServer, candidate_body, free_port

pytestmark = pytest.mark.integration

TARGET = "manifest.target.url"


def served(settings: Settings, **egress: Any) -> Iterator[httpx.Client]:
    port = free_port()
    own = settings.model_copy(update={"host": "127.0.0.1", "port": port, **egress})
    with ApiServer(create_app(own), port=port) as server:
        assert server.url.endswith(f":{port}")
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            yield client


@pytest.fixture
def production(settings: Settings, keys: KeyBook) -> Iterator[httpx.Client]:
    """The API on its own port with PostgreSQL and Redis: loopback and private refused."""
    for client in served(settings, egress_allow_loopback=None, egress_allow_private=None):
        client.headers.update(keys.headers("ci"))
        yield client


@pytest.fixture
def loopback_allowed(settings: Settings, keys: KeyBook) -> Iterator[httpx.Client]:
    """The same, with loopback allowed by the operator: the gate's own ports stay refused."""
    for client in served(settings, egress_allow_loopback=True):
        client.headers.update(keys.headers("ci"))
        yield client


def http_target(url: str) -> dict[str, Any]:
    body = candidate_body("typed", trials=1, seed=1, modes=["subject_swap"])
    body["manifest"]["target"] = {"kind": "http", "url": url}
    return body


def refused(response: httpx.Response, field: str, rule: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert "egress refused" in error["message"] and rule in error["message"], error


def control_plane(client: httpx.Client, settings: Settings) -> dict[str, str]:
    db = urlsplit(settings.database_url)
    broker = urlsplit(settings.broker_url)
    api = urlsplit(str(client.base_url))
    return {
        "API": f"http://localhost:{api.port}/v1/assays",
        "database": f"http://{db.hostname}:{db.port or 5432}/",
        "broker": f"http://{broker.hostname}:{broker.port or 6379}/",
    }


@pytest.mark.parametrize("part", ["API", "database", "broker"])
def test_an_http_target_at_the_gates_own_ports_is_refused_even_where_loopback_is_allowed(
    loopback_allowed: httpx.Client, settings: Settings, unchanged: None, part: str
) -> None:
    url = control_plane(loopback_allowed, settings)[part]
    response = loopback_allowed.post("/v1/candidates", json=http_target(url))
    refused(response, TARGET, f"the gate's own {part}")


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://169.254.169.254/latest/meta-data/iam/", "metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://127.0.0.1:9/", "loopback"),
        ("http://2130706433:9/", "loopback"),
        ("http://10.0.0.7/", "private"),
        ("file:///etc/passwd", "scheme"),
    ],
)
def test_a_production_gate_refuses_metadata_loopback_and_private_targets(
    production: httpx.Client, unchanged: None, url: str, rule: str
) -> None:
    response = production.post("/v1/candidates", json=http_target(url))
    if rule == "scheme":  # the manifest's own pattern refuses it first
        assert response.status_code == 422, response.text
        return
    refused(response, TARGET, rule)


def test_the_gates_own_port_at_its_api_port_is_refused_in_production(
    production: httpx.Client, settings: Settings, unchanged: None
) -> None:
    url = control_plane(production, settings)["API"]
    refused(production.post("/v1/candidates", json=http_target(url)), TARGET, "the gate's own API")


def test_an_mcp_manifest_whose_hook_server_is_a_metadata_address_is_refused_naming_it(
    loopback_allowed: httpx.Client, unchanged: None
) -> None:
    manifest = json.loads((EXAMPLE / "manifest.careful.json").read_text())
    manifest["tools"]["servers"]["admin"] = {"url": "http://169.254.169.254/mcp"}
    body = {"source_revision": "0123abc", "manifest": manifest}
    response = loopback_allowed.post("/v1/candidates", json=body)
    refused(response, "manifest.tools.servers.admin.url", "metadata")
