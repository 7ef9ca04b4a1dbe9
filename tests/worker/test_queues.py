"""Which queues a worker consumes: a shared worker the shared queue and the webhook deliveries'
own (sent from threads beside its shards), a tenant's worker its code queue alone."""

from __future__ import annotations

from pathlib import Path

from service.settings import Settings
from worker.__main__ import queues
from worker.webhooks import queue_of


def test_a_shared_worker_consumes_the_shared_queue_and_the_deliveries_own(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, queue="gate")
    assert queues(settings) == ["gate", "gate.webhooks"] and queue_of(settings) == "gate.webhooks"


def test_a_tenant_worker_consumes_its_code_queue_and_never_a_delivery(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, queue="gate", worker_tenant="acme")
    assert queues(settings) == ["gate.tenant.acme"]
