"""`/metrics` for operators: read with the scrape token (a wrong one, or a tenant's key, is
refused), in the Prometheus text format, with decisions, open holds by age, assay durations,
refusals, webhook attempts and the depth of each queue (the shared one, the webhook deliveries'
and each tenant's); a tenant admin's key still reads it
while no token is configured, deprecated and without the series that name tenants."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
import sqlalchemy as sa
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import Session

from service.app import tenants
from service.app.records import KeyRole
from service.asgi import create_app
from service.settings import Settings
from tests.support.api import decided, system_name
from tests.support.keys import KeyBook
from tests.support.service import REDIS_URL, ApiServer, example

pytestmark = pytest.mark.integration

TOKEN = "scrape-" + uuid.uuid4().hex
REFUSED = {"trials": 5, "seed": 4, "modes": ["drop_effect_receipt"]}


@pytest.fixture(scope="module")
def scraped_url(settings: Settings, api_url: str) -> Iterator[str]:
    """A second API process of the same deployment, configured with a scrape token."""
    with ApiServer(create_app(settings.model_copy(update={"metrics_token": TOKEN}))) as server:
        yield server.url


def families(text: str) -> dict[str, Metric]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(family: Metric, suffix: str = "", **labels: str) -> float:
    for sample in family.samples:
        if sample.name == family.name + suffix and all(
            sample.labels.get(k) == v for k, v in labels.items()
        ):
            return float(sample.value)
    raise AssertionError(f"no sample {family.name}{suffix} {labels}")


def test_the_scrape_token_reads_every_operator_series_in_the_prometheus_format(
    client: httpx.Client, settings: Settings, engine: sa.Engine, scraped_url: str
) -> None:
    decided(client, example("refuse-all"), system=system_name("metrics"), version="1", plan=REFUSED)
    tenant = f"queues-{uuid.uuid4().hex[:8]}"
    KeyBook(engine).key("ops", tenant=tenant)
    with Session(engine) as session:
        tenants.set_code(session, settings, tenants.SetCode(tenant, True, "ops"))
    queue = settings.tenant_queue(tenant)
    broker = redis.Redis.from_url(REDIS_URL)
    try:
        broker.rpush(f"{settings.redis_key_prefix}{queue}", b"waiting", b"waiting")
        response = httpx.get(f"{scraped_url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    finally:
        broker.delete(f"{settings.redis_key_prefix}{queue}")
        broker.close()
    assert response.status_code == 200 and "Deprecation" not in response.headers
    found = families(response.text)
    assert value(found["assaygate_decisions"], "_total", decision="hold") >= 1
    assert value(found["assaygate_holds_open"]) >= 1
    assert value(found["assaygate_hold_oldest_open_age_seconds"]) >= 0
    ages = found["assaygate_holds_open_age_seconds"]
    # A histogram with its `_count` and `_sum`, as every reader of the text format expects.
    assert ages.type == "histogram"
    assert value(ages, "_count") == value(ages, "_bucket", le="+Inf")
    assert value(ages, "_count") == value(found["assaygate_holds_open"])
    assert value(ages, "_sum") >= value(found["assaygate_hold_oldest_open_age_seconds"])
    durations = found["assaygate_assay_duration_seconds"]
    assert durations.type == "histogram" and value(durations, "_count") >= 1
    assert value(durations, "_bucket", le="+Inf") == value(durations, "_count")
    for kind in ("sandbox", "injector", "code"):
        assert value(found["assaygate_sandbox_refusals"], "_total", kind=kind) >= 0
    assert found["assaygate_webhook_attempts"].type == "counter"
    assert found["assaygate_webhook_deliveries"].type == "gauge"
    depth = found["assaygate_queue_depth"]
    assert value(depth, queue=queue, tenant=tenant) == 2
    assert value(depth, queue=settings.queue, tenant="") >= 0
    assert value(found["assaygate_broker_up"]) == 1
    assert value(found["assaygate_database_up"]) == 1


def test_the_webhook_deliveries_queue_has_a_depth_of_its_own_beside_the_shared_queue(
    settings: Settings,
) -> None:
    # A deployment's queue that no worker of this module consumes: what waits there stays.
    idle = settings.model_copy(
        update={"metrics_token": TOKEN, "queue": f"idle-{uuid.uuid4().hex[:8]}"}
    )
    lists = [
        f"{idle.redis_key_prefix}{idle.queue}",
        f"{idle.redis_key_prefix}{idle.queue}.webhooks",
    ]
    broker = redis.Redis.from_url(REDIS_URL)
    try:
        broker.rpush(lists[0], b"waiting")
        broker.rpush(lists[1], b"waiting", b"waiting", b"waiting")
        with ApiServer(create_app(idle)) as server:
            response = httpx.get(
                f"{server.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
            )
    finally:
        broker.delete(*lists)
        broker.close()
    depth = families(response.text)["assaygate_queue_depth"]
    assert value(depth, queue=idle.queue, tenant="") == 1
    assert value(depth, queue=f"{idle.queue}.webhooks", tenant="") == 3


def test_a_wrong_token_a_missing_one_or_a_tenant_key_is_refused_once_a_token_is_set(
    scraped_url: str, keys: KeyBook
) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer not-the-token"},
        {"Authorization": f"Bearer {TOKEN}x"},
        keys.headers("ci"),  # a tenant admin's key: every role
    ):
        refused = httpx.get(f"{scraped_url}/metrics", headers=headers)
        assert refused.status_code == 401, headers
        assert "Authorization" in refused.text


def test_without_a_token_a_tenant_admin_key_still_reads_it_deprecated_without_tenant_queues(
    client: httpx.Client, keys: KeyBook
) -> None:
    legacy = client.get("/metrics")
    assert legacy.status_code == 200
    assert legacy.headers["Deprecation"] == "true" and "METRICS_TOKEN" in legacy.headers["Warning"]
    found = families(legacy.text)
    assert "assaygate_decisions" in found and "assaygate_queue_depth" not in found
    reviewer = keys.headers("metrics-reviewer", roles=[KeyRole.REVIEWER])
    assert client.get("/metrics", headers=reviewer).status_code == 403
