"""A tenant's outbound endpoints against the shared worker, through the real service (PostgreSQL,
Redis, the API, a shared worker): a webhook receiver that trickles its reply one byte every two
seconds holds each attempt no longer than the attempt's total deadline and never the assays of
another tenant; a version written as Slack markup arrives in the gate's Slack message as text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.adversarial.deployment import Deployment, deployment
from tests.support import api
from tests.support.agents import StartAgent
from tests.support.api import system_name
from tests.support.receiver import Receiver
from tests.support.service import example, wait_decided, wait_for
from tests.support.trickle import Trickle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DEADLINE_S = 3.0
# A loaded runner's thread may see the cut a little late; nothing like the minutes a trickle took.
LATE_S = 1.5
ATTEMPTS = 3
PLAN = {"trials": 2, "seed": 5, "modes": ["timeout_before_send"]}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("outbound")
    settings = {
        "webhook_timeout_s": DEADLINE_S,
        "webhook_max_attempts": ATTEMPTS,
        "webhook_backoff_s": 0.5,
    }
    with deployment(folder, "outbound", {}, **settings) as served:
        yield served


def hook(service: Deployment, tenant: str, url: str, **shape: Any) -> str:
    with service.admin(tenant) as client:
        created = client.post("/v1/webhooks", json={"url": url, **shape})
    assert created.status_code == 201, created.text
    hook_id: str = created.json()["id"]
    return hook_id


def submit(client: httpx.Client, manifest: dict[str, Any], version: str = "v1") -> str:
    named = {"system": system_name("outbound"), "version": version}
    candidate_id: str = api.submit(client, manifest, plan=PLAN, **named)["id"]
    return candidate_id


def deliveries(service: Deployment, tenant: str, hook_id: str) -> list[dict[str, Any]]:
    with service.admin(tenant) as client:
        response = client.get(f"/v1/webhooks/{hook_id}/deliveries")
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def test_a_trickling_receiver_holds_an_attempt_only_its_deadline_and_no_other_tenants_assay(
    service: Deployment, start_agent: StartAgent
) -> None:
    trickle = Trickle()
    try:
        slow_hook = hook(service, "trickler", trickle.url)
        with service.submitter("trickler") as trickler:
            submit(trickler, example("typed"))
        wait_for(trickle.connected.is_set, 90, "the first attempt at the trickling receiver")

        # While the receiver trickles, another tenant's remote agent is assayed on the same
        # shared worker: it waits for no stranger's receiver.
        agent = start_agent("--controls", "typed")
        remote = {**example("typed"), "target": {"kind": "http", "url": agent}}
        with service.submitter("bystander") as bystander:
            done = wait_decided(bystander, submit(bystander, remote), timeout=30)
        assert done["status"] == "done", done
        assert "target_errors" not in {r["code"] for r in done["reasons"]}, done["reasons"]

        # Each attempt ended at its deadline, failed with the reason, and was tried again.
        wait_for(
            lambda: all(
                d["status"] == "failed" for d in deliveries(service, "trickler", slow_hook)
            ),
            ATTEMPTS * (DEADLINE_S + LATE_S) + 30,
            "every delivery to the trickling receiver failed after its attempts",
        )
    finally:
        trickle.close()
    for delivery in deliveries(service, "trickler", slow_hook):
        attempts = delivery["attempts"]
        assert [a["number"] for a in attempts] == list(range(1, ATTEMPTS + 1)), delivery
        for attempt in attempts:
            assert attempt["outcome"] == "failed" and attempt["status_code"] is None, attempt
            assert "within 3 s (the attempt's deadline)" in attempt["error"], attempt
            assert attempt["duration_ms"] <= (DEADLINE_S + LATE_S) * 1000, attempt


def test_a_version_written_as_slack_markup_reaches_slack_as_text(service: Deployment) -> None:
    version = "<!channel> <https://evil.example|login>"
    with Receiver() as slack:
        hook(service, "marker", slack.url, format="slack", events=["decision"])
        with service.submitter("marker") as marker:
            submit(marker, example("typed"), version=version)
        wait_for(lambda: len(slack.received) >= 1, 90, "the decision in Slack")
    message = json.loads(slack.received[0].body)
    texts = [message["text"]] + [
        text
        for block in message["blocks"]
        for text in [block.get("text", {}).get("text")]
        + [e.get("text") for e in block.get("elements", [])]
        if text
    ]
    assert "&lt;!channel&gt; &lt;https://evil.example|login&gt;" in message["text"]
    assert not any("<!" in text or "<https://evil" in text for text in texts), texts
