"""A tenant admin who aims a webhook at the gate itself: the worker's send path refuses the
control plane and metadata addresses at connection time, refuses loopback where the policy does,
and never follows a redirect, so a webhook is no way into the gate's API, database or broker."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from service.app.webhooks import AttemptOutcome, Outgoing
from service.settings import Settings
from tests.support.receiver import Receiver
from worker.webhooks import post

BODY = json.dumps({"event": "hold.opened", "links": {}})


def production(tmp_path: Path, **overrides: object) -> Settings:
    """A deployment with PostgreSQL and Redis: loopback and private targets refused by default."""
    values: dict[str, object] = {
        "data_dir": tmp_path,
        "database_url": "postgresql+psycopg://gate@127.0.0.1:5432/gate",
        "broker_url": "redis://127.0.0.1:6379/0",
        **overrides,
    }
    return Settings(**values)  # type: ignore[arg-type]


def outgoing(url: str) -> Outgoing:
    return Outgoing(uuid.uuid4(), 1, "hold.opened", url, "json", "whsec_test", BODY)


def test_a_webhook_at_the_gates_database_or_broker_is_refused_at_connection_time(
    tmp_path: Path,
) -> None:
    settings = production(tmp_path, egress_allow_loopback=True)
    for url in ("http://127.0.0.1:5432/", "http://127.0.0.1:6379/", "http://localhost:8000/"):
        sent = post(settings, outgoing(url))
        assert sent.outcome is AttemptOutcome.REFUSED, url
        assert sent.status_code is None and "egress refused" in (sent.error or "")


def test_a_webhook_at_a_metadata_address_is_refused_without_a_connection(tmp_path: Path) -> None:
    sent = post(production(tmp_path), outgoing("http://169.254.169.254/latest/meta-data/"))
    assert sent.outcome is AttemptOutcome.REFUSED and sent.duration_ms < 1000


def test_a_loopback_receiver_is_refused_where_the_policy_refuses_loopback(tmp_path: Path) -> None:
    with Receiver() as receiver:
        sent = post(production(tmp_path), outgoing(receiver.url))
        assert sent.outcome is AttemptOutcome.REFUSED
        assert receiver.received == []
        allowed = post(production(tmp_path, egress_allow_loopback=True), outgoing(receiver.url))
        assert allowed.outcome is AttemptOutcome.DELIVERED and len(receiver.received) == 1


def test_a_redirect_to_the_control_plane_is_not_followed(tmp_path: Path) -> None:
    settings = production(tmp_path, egress_allow_loopback=True)
    with Receiver(statuses=[307], location="http://127.0.0.1:5432/") as receiver:
        sent = post(settings, outgoing(receiver.url))
    assert (sent.outcome, sent.status_code) == (AttemptOutcome.FAILED, 307)
    assert len(receiver.received) == 1
