"""A real worker process with slots, on the warehouse example's real MCP servers serving isolated
worlds: it holds several shards of one assay at once (each sequential fault is one shard that runs
one trial at a time), and the assay's per-fault figures are exactly the local run's. Killed while
it holds them, its shards are sent again and finished by another worker, the figures unchanged."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.asgi import create_app
from service.cli import main
from service.db.models import AssayShard, ShardStatus
from service.settings import Settings
from tests.mcp.test_slots import FAULTS, SLOTS, Slotted, counts, slotted
from tests.support.keys import ALL_ROLES, make_key
from tests.support.service import (
    ApiServer,
    WorkerProcess,
    allow_code,
    in_tenant_code,
    wait_decided,
)

__all__ = ["slotted"]  # the module's warehouse servers with SLOTS worlds

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TENANT = "holder"


def running_on(engine: sa.Engine, assay_id: uuid.UUID, worker: str) -> int:
    with Session(engine) as session:
        rows = session.exec(
            select(AssayShard.shard_index).where(
                col(AssayShard.assay_id) == assay_id,
                col(AssayShard.status) == ShardStatus.RUNNING.value,
                col(AssayShard.worker) == worker,
            )
        ).all()
    return len(rows)


def workers_of(engine: sa.Engine, assay_id: uuid.UUID) -> set[str | None]:
    with Session(engine) as session:
        rows = session.exec(select(AssayShard.worker).where(col(AssayShard.assay_id) == assay_id))
        return set(rows.all())


def submit(client: httpx.Client, manifest: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    body = {"system": f"held-{uuid.uuid4().hex[:8]}", "version": "v1", "source_revision": "abc123"}
    response = client.post("/v1/candidates", json={**body, "manifest": manifest, "plan": plan})
    assert response.status_code == 202, response.text
    submitted: dict[str, Any] = response.json()
    return submitted


def local_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: dict[str, Any], trials: int
) -> dict[str, Any]:
    """The local run's per-fault figures, one trial at a time."""
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    args = ["assay", str(path), "--trials", str(trials), "--json", "--seed", "11"]
    args += ["--rule", "sequential", "--concurrency", "1"]
    for mode in FAULTS:
        args += ["--mode", mode]
    main(args)
    return counts(json.loads(capsys.readouterr().out))


def code_worker(settings: Settings, name: str, tmp_path: Path) -> WorkerProcess:
    """The tenant's own worker with `SLOTS` slots (the agent is its code, in the tests' copy of
    the checkout's tests and examples: `in_tenant_code`)."""
    return WorkerProcess(
        settings, name, tmp_path, tenant=TENANT, extra_env={"ASSAYGATE_WORKER_SLOTS": str(SLOTS)}
    )


@pytest.fixture
def sealer(settings: Settings, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A shared worker: it seals and signs what the tenant's worker stores (which never signs)."""
    worker = WorkerProcess(settings, "held-sealer", tmp_path)
    worker.wait_ready(60)
    yield worker
    worker.stop()


def test_a_worker_with_slots_holds_several_shards_of_an_mcp_assay_at_once_with_exact_figures(
    settings: Settings,
    engine: sa.Engine,
    slotted: Slotted,
    sealer: WorkerProcess,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = make_key(engine, TENANT, ALL_ROLES)
    allow_code(engine, TENANT)
    manifest = in_tenant_code(slotted.manifest("careful"))
    # An mcp target's plan is sequential unless it says otherwise: one shard a fault, run one
    # trial at a time, so alone each would use one of the four slots.
    plan = {"trials": 3, "seed": 11, "modes": list(FAULTS)}
    worker = code_worker(settings, "held-mcp", tmp_path)
    try:
        worker.wait_ready(120)
        with (
            ApiServer(create_app(settings)) as server,
            httpx.Client(base_url=server.url, timeout=30.0, headers=key.headers) as client,
        ):
            submitted = submit(client, manifest, plan)
            assay_id = uuid.UUID(submitted["assay_id"])
            done = wait_decided(client, submitted["id"], timeout=600)
            report = client.get(f"/v1/assays/{assay_id}").json()["report"]
    finally:
        worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert done["status"] == "done", log[-3000:]
    # One worker process ran every fault's shard at once: the shard its first message began held
    # the other faults' shards with it (what the worker did, read from its log, not a poll that a
    # busy machine's scheduling could miss), and each shard records this worker.
    together = [
        line
        for line in (json.loads(t) for t in log.splitlines() if t.startswith("{"))
        if line.get("msg") == "holding shards together" and line.get("assay_id") == str(assay_id)
    ]
    assert len(together) == 1, log[-3000:]
    held = {int(together[0]["shard"]), *map(int, together[0]["held"].split(","))}
    assert held == set(range(len(FAULTS))), together
    assert workers_of(engine, assay_id) == {worker.hostname}
    expected = local_counts(tmp_path, capsys, manifest, 3)
    assert counts(report)["faults"] == expected["faults"]
    assert counts(report)["decision"] == expected["decision"]


def test_the_shards_a_killed_worker_held_are_sent_again_and_the_figures_stay_exact(
    settings: Settings,
    engine: sa.Engine,
    slotted: Slotted,
    sealer: WorkerProcess,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = make_key(engine, TENANT, ALL_ROLES)
    allow_code(engine, TENANT)
    manifest = in_tenant_code(slotted.manifest("careful"))
    plan = {"trials": 6, "seed": 11, "modes": list(FAULTS)}
    doomed = code_worker(settings, "held-doomed", tmp_path)
    rescuer: WorkerProcess | None = None
    try:
        doomed.wait_ready(120)
        with (
            ApiServer(create_app(settings)) as server,
            httpx.Client(base_url=server.url, timeout=30.0, headers=key.headers) as client,
        ):
            submitted = submit(client, manifest, plan)
            assay_id = uuid.UUID(submitted["assay_id"])
            end = time.monotonic() + 300
            while running_on(engine, assay_id, doomed.hostname) < 2:
                assert time.monotonic() < end, doomed.log_path.read_text(errors="replace")[-3000:]
                time.sleep(0.05)
            doomed.kill()
            held = [s for s in shard_rows(engine, assay_id) if s.status == ShardStatus.RUNNING]
            assert len(held) >= 2
            rescuer = code_worker(settings, "held-rescuer", tmp_path)
            rescuer.wait_ready(120)
            done = wait_decided(client, submitted["id"], timeout=600)
            report = client.get(f"/v1/assays/{assay_id}").json()["report"]
    finally:
        doomed.stop()
        if rescuer is not None:
            rescuer.stop()
    final = shard_rows(engine, assay_id)
    assert done["status"] == "done"
    assert all(s.status == ShardStatus.DONE for s in final)
    # Every shard the dead worker held was started again, by the worker that lived.
    again = {s.shard_index: s for s in final}
    assert all(again[s.shard_index].attempts >= 2 for s in held)
    assert all(again[s.shard_index].worker != doomed.hostname for s in held)
    expected = local_counts(tmp_path, capsys, manifest, 6)
    assert counts(report)["faults"] == expected["faults"]
    assert counts(report)["decision"] == expected["decision"]


def shard_rows(engine: sa.Engine, assay_id: uuid.UUID) -> list[AssayShard]:
    with Session(engine) as session:
        return list(
            session.exec(
                select(AssayShard)
                .where(col(AssayShard.assay_id) == assay_id)
                .order_by(col(AssayShard.shard_index))
            ).all()
        )
